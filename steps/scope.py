"""What one turn carries from step to step: its ports, options and working state.

A ``TurnScope`` is made per turn and shared by nothing else, so many turns can
run concurrently in one event loop (DESIGN.md "Embedding"). The pipeline context
(AGN-036) is ``scope.ctx``; everything here that is not on the context — the
transaction, the messages for the model, the tool set of the turn, the mode
changes — is working state that the steps hand to one another.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import InitVar, dataclass, field, fields
from typing import Any, Final, Literal, get_args

from aptix_pipeline.contracts import (
    LLM,
    AgentCatalog,
    AgentExecuteRequest,
    Budget,
    Caller,
    ChatMessage,
    Clock,
    FileRef,
    FileStore,
    IdSource,
    InvokeWarning,
    LLMRequest,
    ModeCatalog,
    PipelineContext,
    PriceTable,
    Retriever,
    SessionStore,
    SessionTransaction,
    ToolCall,
    ToolDefinition,
    ToolExecutor,
    ToolInvocation,
    ToolResult,
    Usage,
    UsageCall,
    UsageLedger,
)

from .exception_text import ERROR_DETAILS, ErrorDetail
from .observer import NullObserver, TurnObserver
from .tool_ledger import POSSIBLY_EXECUTED_POLICIES, PossiblyExecutedPolicy, tool_call_key
from .tool_records import ModeChange, ToolCallRecord

__all__ = [
    "MAX_IDEMPOTENCY_TTL_SECONDS",
    "TRANSCRIPT_POLICIES",
    "AnswerKeys",
    "PipelineOptions",
    "Ports",
    "TranscriptPolicy",
    "TurnScope",
]

TranscriptPolicy = Literal["truncate", "refuse"]
"""What a turn does with a transcript over ``max_transcript_messages`` (``PipelineOptions``)."""
TRANSCRIPT_POLICIES: Final[tuple[TranscriptPolicy, ...]] = get_args(TranscriptPolicy)
MAX_IDEMPOTENCY_TTL_SECONDS: Final = 100 * 365 * 86_400
"""The longest ``idempotency_ttl_seconds`` (100 years of 365 days), here and in the
``[engine]`` table: an expiry past year 9999 cannot be a datetime."""


@dataclass(frozen=True, slots=True)
class Ports:
    """Everything the pipeline talks to (contracts/ports.py).

    ``tools`` maps a server tool's name to the executor that runs it; the Mode
    Catalog decides which server tools a mode advertises (AGN-011 §4.2).
    ``files`` keeps the files server tools return (``contracts/files.py``); without
    one, a tool that returns files fails (docs/FILES.md).
    ``retriever`` finds passages for a turn's instruction and RAG scope (AGN-034
    §4.4, docs/RETRIEVAL.md); without one the scope reaches the model as text.
    """

    store: SessionStore
    llm: LLM
    modes: ModeCatalog
    agents: AgentCatalog
    clock: Clock
    ids: IdSource
    tools: Mapping[str, ToolExecutor] = field(default_factory=dict)
    files: FileStore | None = None
    retriever: Retriever | None = None
    usage: UsageLedger | None = None
    """Where each model call's usage is reserved and settled against budgets
    (``contracts/usage.py``); the pipeline sets it to the store when the store is one
    and ``PipelineOptions.usage_ledger`` holds. ``None``: usage is not kept."""


@dataclass(frozen=True, slots=True)
class PipelineOptions:
    """How the engine behaves where the DDRs leave it open.

    - ``max_server_tool_rounds``: how many times one request may call the model
      again after handling tool calls itself (DESIGN.md R5); past it the turn faults
      with ``DESIGN/R5/round-limit``.
    - ``llm_attempts``: tries per model call before the turn faults (``port_failed``).
    - ``retry_wait_seconds`` / ``retry_max_wait_seconds``: exponential back-off
      between those tries.

    Limits (docs/CONFIGURATION.md "Limits", docs/CONFORMANCE.md D200-D219):

    - ``turn_deadline_seconds``: the most one turn may take, commit excepted; past
      it the turn faults with ``deadline_exceeded`` (``DESIGN/limits/turn-deadline``)
      and stores nothing. ``None`` disables it.
    - ``server_tool_timeout_seconds``: the most one server tool call may take; past
      it the call fails as a tool that raised, and the model is told it timed out
      (``DESIGN/limits/server-tool-timeout``). ``None`` disables it.
    - ``max_model_reply_chars``: the most characters one model reply may hold (its
      text, tool names, ids and arguments); a bigger reply faults the turn with
      ``port_failed`` (``DESIGN/limits/model-reply-size``), without another try.
    - ``max_transcript_messages`` / ``transcript_policy``: how many stored messages
      of a session the model is sent; past it ``"truncate"`` leaves the oldest
      out (with a warning) and ``"refuse"`` faults the turn
      (``DESIGN/limits/transcript-size``).
    - ``max_json_depth``: deepest JSON array/object nesting a request (or the JSON
      text of a ``ResultJson``) may have (default 64); deeper is refused first, with
      ``DESIGN/limits/json-depth``.
    - ``max_errors``: most errors a refused request lists (default 20); the rest
      are counted in one last ``DESIGN/limits/error-count`` error ("… and N more").
    - ``max_input_artifacts`` (100), ``max_clipboard_images`` (20),
      ``max_tool_results`` (128): per-request counts, past which the request is
      refused with ``DESIGN/limits/input-artifacts`` / ``clipboard-images`` /
      ``tool-results``.
    - ``max_images`` (20), ``max_image_bytes`` (5 MiB), ``max_total_image_bytes``
      (20 MiB): the images of a request (clipboard images and base64 ``image/*``
      artifacts, which reach the model as image parts): their count, the decoded
      bytes of each and of all; past a cap the request is refused with
      ``DESIGN/limits/image-count`` / ``image-bytes`` / ``image-total-bytes``.
    - ``idempotency_ttl_seconds``: how long a committed turn's answer is kept for
      retries (default 86,400 s, a day): an identical continuation, or a request
      with the same idempotency key, is answered from it without running again
      (docs/CONFORMANCE.md D181-D185). ``None`` keeps answers for good.

    - ``retrieval_limit``: the most passages a turn asks its retriever for
      (default 5; docs/RETRIEVAL.md).

    Server-tool effects (docs/TOOLS.md "Exactly once"):

    - ``tool_ledger``: run each server-tool call through the store's ``ToolLedger``
      when the store has one (default ``True``): a call an earlier attempt of the
      turn finished is answered from the ledger, not run again. ``False``: calls
      are not ledgered (each still gets its idempotency key).
    - ``tool_ledger_ttl_seconds``: how long the ledger keeps an entry (default
      604,800 s, seven days): ``Pipeline.purge_tool_ledger`` deletes those reserved
      longer ago. A call retried after that runs as a new one. ``None`` keeps
      entries for good.
    - ``possibly_executed_policy``: what a call an earlier attempt started and
      never finished becomes when its tool is not declared idempotent: ``"fail"``
      (the only policy yet) — a tool error ``tool_possibly_executed``.

    Usage, cost and budgets (docs/BUDGETS.md, issue 31):

    - ``usage_ledger``: keep every model call's usage in the store's
      ``UsageLedger`` when the store has one (default ``True``); budgets need it.
    - ``prices``: the ``PriceTable`` each call's cost comes from; ``None``: no
      prices, so every call is unpriced (counted as such, never as free).
    - ``budgets``: the ``Budget``s checked before each model call (reserving the
      call's estimate, settled after it); a call that would exceed one is not
      made and the turn ends with ``budget_exceeded``.
    - ``max_output_tokens``: the output cap each model call is sent with
      (``LLMRequest.max_output_tokens``); ``None`` sends none.
    - ``output_tokens_estimate``: what a call's output is reckoned at when it
      has no cap (default 4,096 tokens): its reservation is its prompt's
      estimated tokens plus its cap, or plus this.

    Traces (docs/UI.md "Every turn leaves its trace", issue 33):

    - ``keep_traces``: keep each turn's state trace (``engine/trace.py``), failed
      turns included, in the store's ``TraceLog`` when the store has one (default
      ``True``: a trace holds no user content unless content is captured). Kept on
      its own after the turn; a trace that cannot be kept is logged, never a fault.
    - ``trace_ttl_seconds``: how long a kept trace lasts (default 2,592,000 s,
      thirty days): each trace kept sweeps some expired ones, and
      ``Pipeline.purge_traces`` deletes them all. ``None`` keeps traces for good.

    Failures (docs/EXTENDING.md "Hooks and host rules"):

    - ``error_detail``: how much of an exception a host's code raised reaches the
      caller — a failing server tool's ``ToolResults[].ErrorMessage`` and the
      model's tool message, and the errors of a turn that a failing store,
      catalog, model, retriever or host rule faulted: ``"short"`` (the default;
      the class and the first line of the message, at most 200 characters),
      ``"class"`` (the class alone) or ``"full"`` (the class and the whole
      message). An ``internal`` fault (a hook, a step) names the class alone but
      with ``"full"``. Never a traceback (``steps/exception_text.py``).
    - ``tool_error_detail``: the former name of ``error_detail``, read from
      recordings and code made when the policy covered server tools alone; when
      given it is the ``error_detail`` (an init-only argument: it is not kept).
    """

    max_server_tool_rounds: int = 8
    llm_attempts: int = 3
    retry_wait_seconds: float = 0.2
    retry_max_wait_seconds: float = 2.0
    turn_deadline_seconds: float | None = 300.0
    server_tool_timeout_seconds: float | None = 30.0
    max_model_reply_chars: int = 1_000_000
    max_transcript_messages: int = 1000
    transcript_policy: TranscriptPolicy = "truncate"
    max_json_depth: int = 64
    max_errors: int = 20
    max_input_artifacts: int = 100
    max_clipboard_images: int = 20
    max_tool_results: int = 128
    max_images: int = 20
    max_image_bytes: int = 5 * 1024 * 1024
    max_total_image_bytes: int = 20 * 1024 * 1024
    idempotency_ttl_seconds: float | None = 86_400.0
    error_detail: ErrorDetail = "short"
    retrieval_limit: int = 5
    tool_ledger: bool = True
    tool_ledger_ttl_seconds: float | None = 604_800.0
    possibly_executed_policy: PossiblyExecutedPolicy = "fail"
    usage_ledger: bool = True
    prices: PriceTable | None = None
    budgets: tuple[Budget, ...] = ()
    max_output_tokens: int | None = None
    output_tokens_estimate: int = 4096
    keep_traces: bool = True
    trace_ttl_seconds: float | None = 2_592_000.0
    tool_error_detail: InitVar[ErrorDetail | None] = None

    def __post_init__(self, tool_error_detail: ErrorDetail | None) -> None:
        self._spending()
        if min(self.max_input_artifacts, self.max_clipboard_images, self.max_tool_results) < 0:
            raise ValueError("count caps must be 0 or more")
        if min(self.max_images, self.max_image_bytes, self.max_total_image_bytes) < 0:
            raise ValueError("image caps must be 0 or more")
        if self.max_errors < 1:
            raise ValueError("max_errors must be 1 or more")
        if self.max_json_depth < 1:
            raise ValueError("max_json_depth must be 1 or more")
        if self.max_server_tool_rounds < 0:
            raise ValueError("max_server_tool_rounds must be 0 or more")
        if self.llm_attempts < 1:
            raise ValueError("llm_attempts must be 1 or more")
        if self.retry_wait_seconds < 0 or self.retry_max_wait_seconds < 0:
            raise ValueError("retry waits must not be negative")
        for name in (
            "turn_deadline_seconds",
            "server_tool_timeout_seconds",
            "idempotency_ttl_seconds",
            "tool_ledger_ttl_seconds",
            "trace_ttl_seconds",
        ):
            seconds = getattr(self, name)
            if seconds is not None and not seconds > 0:  # NaN is refused too
                raise ValueError(f"{name} must be more than 0, or None for no limit")
        if (self.idempotency_ttl_seconds or 0) > MAX_IDEMPOTENCY_TTL_SECONDS:
            raise ValueError(
                "idempotency_ttl_seconds must be at most 100 years "
                f"({MAX_IDEMPOTENCY_TTL_SECONDS:.0f} s), or None to keep answers for good"
            )
        if (self.tool_ledger_ttl_seconds or 0) > MAX_IDEMPOTENCY_TTL_SECONDS:
            raise ValueError(
                "tool_ledger_ttl_seconds must be at most 100 years "
                f"({MAX_IDEMPOTENCY_TTL_SECONDS:.0f} s), or None to keep entries for good"
            )
        if (self.trace_ttl_seconds or 0) > MAX_IDEMPOTENCY_TTL_SECONDS:
            raise ValueError(
                "trace_ttl_seconds must be at most 100 years "
                f"({MAX_IDEMPOTENCY_TTL_SECONDS:.0f} s), or None to keep traces for good"
            )
        if self.max_model_reply_chars < 1:
            raise ValueError("max_model_reply_chars must be 1 or more")
        if self.retrieval_limit < 1:
            raise ValueError("retrieval_limit must be 1 or more")
        if self.possibly_executed_policy not in POSSIBLY_EXECUTED_POLICIES:
            raise ValueError(
                "possibly_executed_policy must be one of "
                f"{', '.join(POSSIBLY_EXECUTED_POLICIES)}, not {self.possibly_executed_policy!r}"
            )
        if self.max_transcript_messages < 1:
            raise ValueError("max_transcript_messages must be 1 or more")
        if self.transcript_policy not in TRANSCRIPT_POLICIES:
            raise ValueError(
                f"transcript_policy must be one of {', '.join(TRANSCRIPT_POLICIES)}, "
                f"not {self.transcript_policy!r}"
            )
        if tool_error_detail is not None:  # the former name (its recordings replay)
            if tool_error_detail not in ERROR_DETAILS:
                raise ValueError(
                    f"tool_error_detail must be one of {', '.join(ERROR_DETAILS)}, "
                    f"not {tool_error_detail!r}"
                )
            if self.error_detail not in ("short", tool_error_detail):
                raise ValueError(
                    "error_detail and tool_error_detail (its former name) disagree: give one"
                )
            object.__setattr__(self, "error_detail", tool_error_detail)
        if self.error_detail not in ERROR_DETAILS:
            raise ValueError(
                f"error_detail must be one of {', '.join(ERROR_DETAILS)}, not {self.error_detail!r}"
            )

    def _spending(self) -> None:
        """Prices and budgets as models (a recording's options hold them as JSON data),
        each budget id once; the output cap and estimate positive."""
        prices = self.prices
        if prices is not None and not isinstance(prices, PriceTable):
            object.__setattr__(self, "prices", PriceTable.model_validate(prices))
        budgets = tuple(
            budget if isinstance(budget, Budget) else Budget.model_validate(budget)
            for budget in self.budgets
        )
        object.__setattr__(self, "budgets", budgets)
        seen: set[str] = set()
        for budget in budgets:
            if budget.id in seen:
                raise ValueError(f"budgets: id {budget.id!r} is given twice")
            seen.add(budget.id)
        if self.max_output_tokens is not None and self.max_output_tokens < 1:
            raise ValueError("max_output_tokens must be 1 or more, or None for no cap")
        if self.output_tokens_estimate < 0:
            raise ValueError("output_tokens_estimate must be 0 or more")

    def to_dict(self) -> dict[str, Any]:
        """The options as JSON data (a recording keeps them so; ``PipelineOptions(**d)``
        reads them back)."""
        data = {name.name: getattr(self, name.name) for name in fields(self)}
        prices = self.prices
        data["prices"] = None if prices is None else prices.model_dump(mode="json")
        data["budgets"] = [budget.model_dump(mode="json") for budget in self.budgets]
        return data


@dataclass(frozen=True, slots=True)
class AnswerKeys:
    """Under which keys a turn keeps its answer, so a retry is answered again.

    ``keys`` are ``StoredOutcome`` keys of the caller (``continuation:<sha256>``,
    ``key:<Idempotency-Key>``); ``request_digest`` names the request that ran;
    ``ttl_seconds`` is how long the keys hold (``None``: for good). The engine
    makes these (``engine/idempotency.py``) and the commit saves them with the
    turn (``steps/completion.py``; docs/CONFORMANCE.md D181).
    """

    keys: tuple[str, ...]
    request_digest: str
    ttl_seconds: float | None


@dataclass(slots=True)
class Reckoning:
    """What the turn's messages so far are reckoned at (``steps/budget.py``): how many
    were counted, their characters and images."""

    messages: int = 0
    chars: int = 0
    images: int = 0
    last: object = None
    """The last message counted: when it is no longer where it was, all are counted anew."""


@dataclass(slots=True)
class TurnScope:
    """The working state of one turn; see the module docstring."""

    ports: Ports
    options: PipelineOptions
    caller: Caller
    raw_request: AgentExecuteRequest | Mapping[str, Any] | str | bytes
    initial_mode: str | None = None
    context: PipelineContext | None = None
    request: AgentExecuteRequest | None = None
    tx: SessionTransaction | None = None
    messages: list[ChatMessage] = field(default_factory=list)
    """The conversation as the model sees it, without the system message."""
    new_messages: list[ChatMessage] = field(default_factory=list)
    """The messages this request adds to the session's transcript."""
    tool_index: dict[str, ToolDefinition] = field(default_factory=dict)
    expanded: list[str] = field(default_factory=list)
    llm_calls: int = 0
    another_round: bool = False
    usage: Usage | None = None
    reserved: UsageCall | None = None
    """The model call reserved against budgets and not yet made (``steps/budget.py``)."""
    unsettled: list[UsageCall] = field(default_factory=list)
    """Model calls made and not yet settled in the usage ledger."""
    next_request: LLMRequest | None = None
    """The model request the budget guard reckoned, for the call to send as is."""
    reckoning: Reckoning = field(default_factory=Reckoning)
    server_results: list[ToolResult] = field(default_factory=list)
    files: list[FileRef] = field(default_factory=list)
    paused: list[ToolCall] = field(default_factory=list)
    """The client calls of server tools that paused this round (``ToolPause``)."""
    resumed: list[tuple[ToolCall, str, str]] = field(default_factory=list)
    """On a continuation: the paused server calls (as the model made them), the id
    the client answered, and its answer, each run again before the model is asked."""
    """The files the turn's server tools made, over all its requests (AGN-033 §6.2)."""
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    mode_changes: list[ModeChange] = field(default_factory=list)
    branch: bool | None = None
    """``branch`` of the turn's last successful ``agent_change_mode`` call (DESIGN.md R7)."""
    warnings: list[InvokeWarning] = field(default_factory=list)
    user_warnings: list[str] = field(default_factory=list)
    """What the final response's ``UserWarnings`` says (AGN-033 §4.3): an image the
    model was not shown, for one."""
    mode_display_name: str | None = None
    answer_keys: AnswerKeys | None = None
    """Where the commit keeps the turn's answer for retries (``None``: nowhere)."""
    observer: TurnObserver = field(default_factory=NullObserver)
    """Where the steps report model calls, tool calls and mode changes (state trace, spans)."""
    capture_content: bool = False
    """Whether user content may be recorded: the log of a host's exception then holds
    its message (``traceback_text``, D292)."""

    def warn(self, warning: InvokeWarning) -> None:
        """Add a warning to the turn's result and tell the observer."""
        self.warnings.append(warning)
        self.observer.warned(warning)

    @property
    def ctx(self) -> PipelineContext:
        """The pipeline context; the RequestHandler creates it (AGN-036 §4.1)."""
        if self.context is None:
            raise RuntimeError("the pipeline context is created by the RequestHandler step")
        return self.context

    @property
    def transaction(self) -> SessionTransaction:
        """The turn's store transaction, begun by the RequestHandler."""
        if self.tx is None:
            raise RuntimeError("the store transaction is begun by the RequestHandler step")
        return self.tx

    def invocation(
        self,
        call: ToolCall,
        client_answer: str | None = None,
        arguments: Mapping[str, Any] | None = None,
    ) -> ToolInvocation:
        """Who and what a server-side call of this turn is for (the ToolExecutor port);
        ``client_answer`` resumes a call that paused (``ToolPause``). With the call's
        ``arguments`` it carries the call's idempotency key (``tool_call_key``) and
        what the tool's definition declares about running it again."""
        ctx = self.ctx
        session_id = ctx.session.id if ctx.session else ""
        turn_id = ctx.turn.id if ctx.turn else ""
        tool = self.tool_index.get(call.name)
        return ToolInvocation(
            client_answer=client_answer,
            tool_call_id=call.tool_call_id,
            name=call.name,
            session_id=session_id,
            turn_id=turn_id,
            mode=ctx.mode or "",
            org=self.caller.org,
            user=self.caller.user,
            idempotency_key=None
            if arguments is None
            else tool_call_key(session_id, turn_id, call.tool_call_id, arguments),
            idempotent=None if tool is None else tool.idempotent,
        )

    @property
    def advertised_tools(self) -> list[ToolDefinition]:
        """The tools offered to the model now: members of unexpanded containers stay hidden.

        The set itself was frozen before the reasoner loop (AGN-011 §4.4); expanding a
        container only reveals members already in it (DESIGN.md R9).
        """
        return [
            tool
            for tool in self.tool_index.values()
            if tool.member_of is None or tool.member_of in self.expanded
        ]
