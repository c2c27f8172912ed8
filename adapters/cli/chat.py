"""``aptix chat``: a session held in the terminal, one turn a line (AGN-034, AGN-033).

Each line the user types is a turn: the first an Initial request (with
``--agent``'s ``AgentContextId``), each later one a FollowOn of the turn before.
The turn runs streamed (``cli/stream.py``): the model's text on stdout as it is
written, progress on stderr. A turn that ends in a ``client_tool_continuation``
(AGN-033 §5) needs the client's tool results: for each call ``chat`` runs the
tool's handler (``[chat.handlers]`` in ``--config``, or ``--handler TOOL=COMMAND``,
which wins; D371) or asks the user, then sends
the results as a ClientToolCallContinuation and goes on until the turn answers.

- The user answers a tool call with one line: JSON is the tool's result
  (``ResultJson``); a line starting ``!`` is its error (``ErrorMessage``).
- A handler is a command run without a shell (``shlex`` splits it): the call's
  arguments JSON on its stdin, ``APTIX_TOOL_NAME`` and ``APTIX_TOOL_CALL_ID`` in its
  environment. Exit 0: its stdout is the result (JSON as is, other text as a JSON
  string); any other exit: the error, its stderr's last line.
- ``/quit`` or end of input ends the chat (exit 0). Ctrl-C during a turn cancels
  that turn (nothing of it is stored) and the chat goes on; Ctrl-C at the prompt,
  or while a tool result is asked, ends the chat (exit 130; that turn stays
  pending in the store). A turn that fails says why on stderr; the session
  stays as it was.

Prompts (``you>``, a tool's question) go to stderr, and only when stdin is a
terminal, so piped input gives stdout the answers alone. The ports are opened as
``aptix run`` opens them (``cli/run.py``): the same options, secrets read only
where used, a script keyed by turn played from each request's turn (D370).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TextIO, cast

import typer

from .logs import show_logs
from .run import (
    DEFAULT_ORG,
    DEFAULT_USER,
    ConfigOption,
    InitialModeOption,
    LlmScriptOption,
    OrgOption,
    StoreOption,
    UserOption,
    VerboseOption,
    budget_refusal_line,
)

if TYPE_CHECKING:
    from aptix_pipeline.adapters.config import ServiceConfig
    from aptix_pipeline.contracts import (
        LLM,
        AgentExecuteResponse,
        Caller,
        SessionStore,
        ToolCall,
    )
    from aptix_pipeline.engine import Pipeline, TurnReport

__all__ = ["chat", "parse_handlers"]

_INTERRUPTED = 130
_QUIT = "/quit"


class _ChatEndedError(Exception):
    """The user ended the chat: ``/quit`` or end of input while a tool result was asked."""


def parse_handlers(specs: list[str]) -> dict[str, list[str]]:
    """``--handler TOOL=COMMAND`` options as tool name → the command's words; a malformed
    one is a ``ValueError`` naming it."""
    import shlex

    handlers: dict[str, list[str]] = {}
    for spec in specs:
        name, sep, command = spec.partition("=")
        if not sep or not name.strip() or not command.strip():
            raise ValueError(f"--handler {spec!r}: write TOOL=COMMAND")
        try:
            words = shlex.split(command)
        except ValueError as error:
            raise ValueError(f"--handler {spec!r}: {error}") from None
        handlers[name.strip()] = words
    return handlers


def chat(
    llm_script: LlmScriptOption = None,
    store: StoreOption = None,
    org: OrgOption = DEFAULT_ORG,
    user: UserOption = DEFAULT_USER,
    config: ConfigOption = None,
    initial_mode: InitialModeOption = None,
    agent: Annotated[
        str | None, typer.Option(help="The agent of the session (its AgentContextId).")
    ] = None,
    handler: Annotated[
        list[str] | None,
        typer.Option(
            "--handler",
            help="TOOL=COMMAND: run COMMAND for each call of the client tool TOOL (arguments "
            "JSON on stdin, result on stdout) instead of asking; repeatable.",
        ),
    ] = None,
    verbose: VerboseOption = False,
) -> None:
    """Hold a session in the terminal: each line a turn, answers as they are written.

    Client tool calls are answered by their --handler, or asked for (a JSON result,
    or !message for an error). /quit or end of input ends the chat. Exit codes: 0
    ended, 2 usage error, 130 Ctrl-C while waiting for input.
    """
    from . import run as cli_run

    cli_run.COMMAND_NAME.set("chat")
    show_logs(verbose)
    if not org.strip() or not user.strip():
        raise cli_run.usage_error("--org and --user must not be empty")
    provider = cli_run.start_tracing()
    service = cli_run.load_config(config, model=llm_script is None, store=store is None)
    configured = (
        [f"{name}={command}" for name, command in service.chat_handlers.items()]
        if (service is not None)
        else []
    )
    try:
        handlers = parse_handlers([*configured, *(handler or [])])  # the options win
    except ValueError as error:
        raise cli_run.usage_error(str(error)) from None
    script = llm_script or cli_run.config_script(service)
    llm = cli_run.open_model(llm_script, service)
    session_store = cli_run.open_session_store(store, service)
    session = _Chat(
        service=service,
        provider=provider,
        store=session_store,
        llm=llm,
        script=script,
        caller=cli_run.caller_of(org, user),
        initial_mode=initial_mode,
        agent=agent,
        handlers=handlers,
    )
    try:
        code = session.loop(sys.stdin, sys.stdout, sys.stderr)
    finally:
        cli_run.close_ports(session_store, provider, service)
    raise typer.Exit(code)


class _Chat:
    """One chat's session: its ports, the turn it is at, and how it answers tool calls."""

    def __init__(
        self,
        *,
        service: ServiceConfig | None,
        provider: Any,
        store: SessionStore,
        llm: LLM | None,
        script: Path | None,
        caller: Caller,
        initial_mode: str | None,
        agent: str | None,
        handlers: dict[str, list[str]],
    ) -> None:
        self._service, self._provider, self._store = service, provider, store
        self._llm, self._script = llm, script
        self._caller, self._initial_mode, self._agent = caller, initial_mode, agent
        self._handlers = handlers
        self._last: AgentExecuteResponse | None = None
        """The last answered turn: the next line is its FollowOn."""

    def loop(self, stdin: TextIO, out: TextIO, err: TextIO) -> int:
        """Read lines and run their turns until ``/quit`` or end of input; the exit code."""
        interactive = stdin.isatty()
        while True:
            try:
                line = _ask(stdin, err, "you> " if interactive else None)
            except KeyboardInterrupt:
                err.write("\n")
                return _INTERRUPTED
            if line is None or line.strip() == _QUIT:
                return 0
            if not line.strip():
                continue
            try:
                self._turn(self._request(line.strip()), stdin, out, err, interactive)
            except _ChatEndedError:
                return 0
            except KeyboardInterrupt:  # asking for a tool result, or running its handler
                err.write("\naptix chat: interrupted: the turn waits for its tool results\n")
                return _INTERRUPTED

    def _request(self, instruction: str) -> dict[str, Any]:
        if self._last is None:
            first: dict[str, Any] = {"Instruction": instruction}
            if self._agent:
                first["AgentContextId"] = self._agent
            return first
        return {
            "SessionId": self._last.session_id,
            "TurnId": self._last.turn_id,
            "Instruction": instruction,
        }

    def _turn(
        self, request: dict[str, Any], stdin: TextIO, out: TextIO, err: TextIO, interactive: bool
    ) -> None:
        """Run one turn to its answer, through as many tool continuations as it needs."""
        while True:
            report = self._run(request, out, err)
            if report is None:
                err.write("aptix chat: interrupted: the turn was cancelled, nothing stored\n")
                return
            answer = report.result.result
            if answer is None:
                failures = "; ".join(
                    f"{e.rule_id}: {budget_refusal_line(e)}"
                    if e.code == "budget_exceeded"
                    else f"{e.rule_id or e.code}: {e.message}"
                    for e in report.result.errors
                )
                err.write(f"aptix chat: the turn failed: {failures}\n")
                return
            if self._last is None:
                err.write(f"aptix chat: session {answer.session_id}\n")
            self._last = answer
            if not answer.tool_calls:
                return
            results = [
                self._tool_result(call, stdin, err, interactive) for call in answer.tool_calls
            ]
            request = {
                "SessionId": answer.session_id,
                "TurnId": answer.turn_id,
                "ToolResults": results,
            }

    def _pipeline(self, body: bytes) -> Pipeline:
        """The pipeline for this request: a script keyed by turn is opened at its turn."""
        from . import run as cli_run

        llm = self._llm
        if llm is None and self._script is not None:
            llm = cli_run.open_turn_script(self._script, self._store, self._caller, body)
        assert llm is not None
        return cli_run.build_run_pipeline(
            llm, self._store, self._service, self._provider, None, redact=False
        )

    def _run(self, request: dict[str, Any], out: TextIO, err: TextIO) -> TurnReport | None:
        """The request's turn, streamed; ``None`` when Ctrl-C cancelled it."""
        from .stream import stream_turn

        body = json.dumps(request).encode("utf-8")
        written = _Tally(out)
        report = stream_turn(
            self._pipeline(body),
            body,
            self._caller,
            initial_mode=self._initial_mode,
            idempotency_key=None,
            out=cast(TextIO, written),
            err=err,
        )
        answer = report.result.result if report is not None else None
        if answer is not None and not written.count:  # a model that did not stream its text
            text = answer.primary_output_text or answer.tool_continuation_message
            if text:
                out.write(text + "\n")
                out.flush()
        return report

    def _tool_result(
        self, call: ToolCall, stdin: TextIO, err: TextIO, interactive: bool
    ) -> dict[str, Any]:
        """The client's result for one tool call: its handler's, else the user's."""
        command = self._handlers.get(call.name)
        if command is not None:
            return _run_handler(call, command, err)
        err.write(f"tool {call.name} ({call.tool_call_id}) called with {call.arguments_json}\n")
        while True:
            line = _ask(
                stdin, err, f"{call.name} result (JSON, or !error)> " if interactive else None
            )
            if line is None or line.strip() == _QUIT:
                raise _ChatEndedError
            text = line.strip()
            if text.startswith("!"):
                message = text[1:].strip() or "the tool failed"
                return {"ToolCallId": call.tool_call_id, "ExecutionMs": 0, "ErrorMessage": message}
            try:
                json.loads(text)
            except ValueError as error:
                err.write(f"aptix chat: not JSON ({error}): give JSON, or !message for an error\n")
                continue
            return {"ToolCallId": call.tool_call_id, "ExecutionMs": 0, "ResultJson": text}


def _ask(stdin: TextIO, err: TextIO, prompt: str | None) -> str | None:
    """One line of input (``None`` at its end), the prompt on stderr when there is one."""
    if prompt is not None:
        err.write(prompt)
        err.flush()
    line = stdin.readline()
    return None if line == "" else line.rstrip("\n")


def _run_handler(call: ToolCall, command: list[str], err: TextIO) -> dict[str, Any]:
    """Run a tool's handler command on one call; its result or its error."""
    import os
    import subprocess
    import time

    env = {**os.environ, "APTIX_TOOL_NAME": call.name, "APTIX_TOOL_CALL_ID": call.tool_call_id}
    err.write(f"tool {call.name} ({call.tool_call_id}): running {command[0]}\n")
    started = time.monotonic()
    try:
        done = subprocess.run(
            command, input=call.arguments_json, capture_output=True, text=True, env=env, check=False
        )
    except OSError as error:
        message = f"cannot run {command[0]}: {error.strerror or error}"
        return {"ToolCallId": call.tool_call_id, "ExecutionMs": 0, "ErrorMessage": message}
    elapsed = int((time.monotonic() - started) * 1000)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [""])[-1]
        message = f"{command[0]} exited {done.returncode}" + (f": {last}" if last else "")
        return {"ToolCallId": call.tool_call_id, "ExecutionMs": elapsed, "ErrorMessage": message}
    output = done.stdout.strip()
    try:
        json.loads(output)
    except ValueError:
        output = json.dumps(done.stdout)
    return {"ToolCallId": call.tool_call_id, "ExecutionMs": elapsed, "ResultJson": output}


class _Tally:
    """A text stream that counts what is written through it (``StreamPrinter``'s stdout)."""

    def __init__(self, inner: TextIO) -> None:
        self._inner = inner
        self.count = 0

    def write(self, text: str) -> int:
        self.count += len(text)
        return self._inner.write(text)

    def flush(self) -> None:
        self._inner.flush()

    def isatty(self) -> bool:
        return self._inner.isatty()
