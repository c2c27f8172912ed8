"""The service's two processes: ``aptix serve`` and ``aptix worker``.

``aptix serve --config FILE``: the HTTP service (``http/app.py``) under uvicorn.
With ``--detach`` it starts the same command as a process of its own (its own
session, its output to ``--log``, default ``serve-PORT.log`` in the data folder) and
returns once ``GET /healthz`` answers 200, printing the URL and the ``kill`` that
stops it, so the next line of a pasted script finds the service up (D640). A server
that exits or does not answer within a minute is a failure (exit 1, one line naming
its log's last line); a refusal found before it starts is exit 2, as in the
foreground.

Every worker process builds its own app from the same file (``create_app()`` reads
the path from ``$APTIX_CONFIG``). ``--host``, ``--port``, ``--workers`` and
``--access-log`` override ``[server]``. A configuration that cannot serve (no
``[model]``, no ``[[auth.keys]]``, a ``[retrieval]`` index not built) or a missing
``http`` extra is a usage error (exit code 2).

``aptix worker --config FILE``: a worker of durable turns (docs/DURABLE.md).

It builds the pipeline ``aptix serve`` builds from the same file (store, catalog,
model, server tools, MCP servers, ``[host] extension``, recording, retrieval,
files) and runs its turns from ``[temporal]``'s task queue as a ``DurableWorker``
until SIGINT or SIGTERM, then stops taking work, lets what runs finish (up to
5 s: a turn cut off is finished by another worker) and exits 0. One line on
stderr says it is ready. A bad file, a file without ``[temporal]``, or a missing
``temporal`` extra is a usage error (exit 2, one line); a Temporal that cannot be
reached is exit 1, one line.

``listen`` and ``check_free``: the socket a command that serves listens on, bound
before it says it is serving (D392). ``aptix ui`` binds its socket with ``listen``
and hands it to uvicorn, so a port another program holds is refused in one line
(exit 2) before anything says "serving", and ``--port 0`` serves on the free port
the system picks, which is the one printed. ``aptix serve``, whose workers each
bind their own socket, asks ``check_free`` first.
"""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from aptix_pipeline.adapters.config import ServiceConfig

__all__ = ["check_free", "listen", "serve", "worker"]

_EXTRA = "pip install 'aptix-pipeline[{}]'"
"""How to install an extra a missing package comes with."""


# Typer renders help text as rich markup: a literal "[" is written "\\[".
def serve(
    config: Annotated[
        Path,
        typer.Option(
            exists=True,
            dir_okay=False,
            readable=True,
            help="Configuration TOML (docs/CONFIGURATION.md).",
        ),
    ],
    host: Annotated[str | None, typer.Option(help="Interface; default \\[server].host.")] = None,
    port: Annotated[int | None, typer.Option(help="TCP port; default \\[server].port.")] = None,
    workers: Annotated[
        int | None, typer.Option(min=1, help="Worker processes; default \\[server].workers.")
    ] = None,
    access_log: Annotated[
        bool | None,
        typer.Option(
            "--access-log/--no-access-log",
            help="Log a line per request (uvicorn); default \\[server].access_log, off.",
        ),
    ] = None,
    detach: Annotated[
        bool,
        typer.Option(
            "--detach",
            help="Start in the background and return once GET /healthz answers; "
            "prints the URL and how to stop it.",
        ),
    ] = False,
    log: Annotated[
        Path | None,
        typer.Option(
            help="With --detach: the file the server's output goes to; default "
            "serve-PORT.log in the data folder.",
        ),
    ] = None,
) -> None:
    """Serve POST /v1/agent/execute over HTTP (uvicorn) with the configuration's model and store."""
    _need_http_extra()
    if log is not None and not detach:
        raise _refuse("--log is for --detach: in the foreground the output is this terminal's")
    service = _servable_config(config)
    if detach:
        raise typer.Exit(
            _detach(
                config,
                service,
                host=host,
                port=port,
                workers=workers,
                access_log=access_log,
                log=log,
            )
        )
    _run_uvicorn(config, service, host=host, port=port, workers=workers, access_log=access_log)


def _refuse(message: str) -> typer.Exit:
    """Say what is wrong on stderr; the exit (code 2) to raise."""
    typer.echo(f"aptix serve: {message}", err=True)
    return typer.Exit(2)


def _need_http_extra() -> None:
    """Refuse in one line, naming the extra, when FastAPI or uvicorn is not installed."""
    from importlib.util import find_spec

    missing = [name for name in ("fastapi", "uvicorn") if find_spec(name) is None]
    if missing:
        raise _refuse(f"needs {missing[0]}: {_EXTRA.format('http')}")


def _servable_config(config: Path) -> ServiceConfig:
    """The configuration, loaded; refused without a model or without an API key to serve."""
    from importlib.util import find_spec

    from aptix_pipeline.adapters.config import (
        ConfigError,
        OpenAIModelConfig,
        load_service_config,
        open_retriever,
    )

    try:
        service = load_service_config(config)
    except ConfigError as error:
        raise _refuse(str(error)) from None
    service.close()  # checked: each worker starts its own MCP servers (create_app())
    if service.model is None:
        raise _refuse(f"{config}: a [model] table is required to serve")
    if not service.api_keys:
        raise _refuse(f"{config}: no [[auth.keys]]: every request would be refused")
    try:  # a [retrieval] index not built yet: say so here, not in each worker
        retriever = open_retriever(service)
    except ConfigError as error:
        raise _refuse(str(error)) from None
    getattr(retriever, "close", lambda: None)()
    if isinstance(service.model, OpenAIModelConfig) and find_spec("openai") is None:
        raise _refuse(f"{config}: [model] kind = 'openai' needs openai: {_EXTRA.format('openai')}")
    return service


_READY_SECONDS = 60.0
"""How long ``--detach`` waits for the server's first 200 from ``GET /healthz``."""

_CHILD = "import sys; sys.argv[0] = 'aptix'; from aptix_pipeline.adapters.cli import main; main()"
"""The detached server: this same command, run by this interpreter (no module added)."""


def _detach(
    config: Path,
    service: ServiceConfig,
    *,
    host: str | None,
    port: int | None,
    workers: int | None,
    access_log: bool | None,
    log: Path | None,
) -> int:
    """Start ``aptix serve`` as a process of its own and wait until it is healthy (D640);
    the exit code. Everything the foreground command would refuse is refused here first,
    the port and the log file included, so a refusal leaves no process behind."""
    from aptix_pipeline.adapters.config import default_store_path

    host = host or service.server.host
    port = service.server.port if port is None else port
    try:
        check_free(host, port)
    except OSError as error:
        raise _refuse(f"--host {host} --port {port}: {error.strerror}") from None
    path = (log or default_store_path().parent / f"serve-{port}.log").expanduser().absolute()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        out = path.open("ab")
    except OSError as error:
        raise _refuse(f"--log {path}: {error.strerror or error}") from None
    argv = [sys.executable, "-c", _CHILD, "serve", "--config", str(config.absolute())]
    argv += ["--host", host, "--port", str(port)]
    if workers is not None:
        argv += ["--workers", str(workers)]
    if access_log is not None:
        argv.append("--access-log" if access_log else "--no-access-log")
    with out:
        start = out.tell()
        child = subprocess.Popen(  # its own session: it outlives this command and its terminal
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://{_connect_host(host)}:{port}"
    try:
        code = _wait_healthy(child, url)
    except KeyboardInterrupt:  # Ctrl-C while it starts: nothing is left running
        _stop(child)
        typer.echo("aptix serve: stopped before it was ready (Ctrl-C)", err=True)
        return 130
    if code is not None:
        why = (
            f"did not answer GET /healthz within {_READY_SECONDS:g} s and was stopped"
            if code == _NOT_READY
            else f"exited ({code}) before it answered"
        )
        last = _last_line(path, start)
        typer.echo(f"aptix serve: the server {why}: {last} (its log: {path})", err=True)
        return 1
    typer.echo(
        f"aptix serve: serving {url} (pid {child.pid}, log {path}); stop it: kill {child.pid}"
    )
    return 0


_NOT_READY = -1000
"""``_wait_healthy``'s answer for a server that is up but never answered in time."""


def _wait_healthy(child: subprocess.Popen[bytes], url: str) -> int | None:
    """Wait until ``url`` is healthy (``None``), ``child`` exits (its code), or the time is
    up (``_NOT_READY``, the child stopped)."""
    deadline = time.monotonic() + _READY_SECONDS
    while not _healthy(url):
        code = child.poll()
        if code is not None:
            return code
        if time.monotonic() >= deadline:
            _stop(child)
            return _NOT_READY
        time.sleep(0.1)
    return None


def _stop(child: subprocess.Popen[bytes]) -> None:
    """Stop ``child``: SIGTERM, then SIGKILL when it lingers."""
    child.terminate()
    try:
        child.wait(timeout=10)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def _connect_host(host: str) -> str:
    """Where a client on this machine reaches a server bound to ``host``."""
    bare = host.strip("[]")
    if bare in ("", "0.0.0.0"):
        return "127.0.0.1"
    if bare == "::":
        return "[::1]"
    return f"[{bare}]" if ":" in bare else bare


def _healthy(url: str) -> bool:
    """Whether ``GET url/healthz`` answers 200 now (no proxy: the server is local)."""
    import urllib.error
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"{url}/healthz", timeout=1) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _last_line(path: Path, start: int) -> str:
    """The last non-blank line the server wrote to its log since ``start``."""
    try:
        with path.open("rb") as written:
            written.seek(start)
            text = written.read().decode("utf-8", "replace")
    except OSError:
        return "(its log cannot be read)"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "(it wrote nothing)"


def _run_uvicorn(
    config: Path,
    service: ServiceConfig,
    *,
    host: str | None,
    port: int | None,
    workers: int | None,
    access_log: bool | None,
) -> None:
    """uvicorn serving ``create_app()`` on ``config`` until stopped, the options over
    ``[server]``; refused without the ``http`` extra."""
    try:
        import uvicorn

        from aptix_pipeline.adapters.http import CONFIG_ENV, PROTOCOL_PATH, create_app
    except ImportError as error:
        raise _refuse(f"{error}: {_EXTRA.format('http')}") from None
    host = host or service.server.host
    port = service.server.port if port is None else port
    try:  # a port another program holds: one line, before uvicorn starts (D392)
        check_free(host, port)
    except OSError as error:
        raise _refuse(f"--host {host} --port {port}: {error.strerror}") from None
    # Every worker process builds its own app from the same file (create_app()).
    os.environ[CONFIG_ENV] = str(config.resolve())
    uvicorn.run(
        f"{create_app.__module__}:create_app",
        factory=True,
        host=host,
        port=port,
        workers=workers or service.server.workers,
        access_log=service.server.access_log if access_log is None else access_log,
        http=PROTOCOL_PATH,  # with [server] read_timeout_seconds
    )


def worker(
    config: Annotated[
        Path,
        typer.Option(
            exists=True,
            dir_okay=False,
            readable=True,
            help="Configuration TOML with a \\[temporal] table (docs/DURABLE.md).",
        ),
    ],
    concurrency: Annotated[
        int | None,
        typer.Option(
            min=1, help="Turns run at once; default \\[temporal].max_concurrent_turns (100)."
        ),
    ] = None,
    identity: Annotated[
        str | None,
        typer.Option(
            help="This worker's name; default \\[temporal].identity, else aptix@HOST:PID."
        ),
    ] = None,
) -> None:
    """Run durable turns from Temporal with the configuration's pipeline, until stopped."""
    service = _workable_config(config)
    try:
        code = asyncio.run(_serve(service, concurrency=concurrency, identity=identity))
    finally:
        service.close()  # the MCP servers the configuration started
    raise typer.Exit(code)


def _refuse_work(message: str) -> typer.Exit:
    """Say what is wrong on stderr in one line; the exit (code 2) to raise."""
    typer.echo(f"aptix worker: {message}", err=True)
    return typer.Exit(2)


def _workable_config(config: Path) -> ServiceConfig:
    """The configuration, loaded; refused without ``[temporal]``, ``[model]`` or the extra."""
    from importlib.util import find_spec

    from aptix_pipeline.adapters.config import ConfigError, load_service_config

    if find_spec("temporalio") is None:
        raise _refuse_work(f"needs temporalio: {_EXTRA.format('temporal')}")
    try:
        service = load_service_config(config, secrets_for=("store", "model", "files"))
    except ConfigError as error:
        raise _refuse_work(str(error)) from None
    if service.temporal is None:
        service.close()
        raise _refuse_work(f"{config}: a [temporal] table is required to run a worker")
    if service.model is None:
        service.close()
        raise _refuse_work(f"{config}: a [model] table is required to run a worker")
    return service


async def _serve(service: ServiceConfig, *, concurrency: int | None, identity: str | None) -> int:
    """Serve until SIGINT or SIGTERM; the exit code."""
    from aptix_pipeline.adapters.config import ConfigError
    from aptix_pipeline.adapters.embedded import build_pipeline, durable_worker
    from aptix_pipeline.adapters.models import log_retry_notices
    from aptix_pipeline.adapters.system import configure_tracing
    from aptix_pipeline.engine import Telemetry

    from .logs import show_logs

    show_logs(verbose=False)
    temporal = service.temporal
    assert temporal is not None
    provider = configure_tracing()
    try:
        pipeline = build_pipeline(
            service,
            telemetry=Telemetry(tracer_provider=provider, span_mode=service.span_mode),
            listeners=(log_retry_notices(service.options),),
        )
    except ConfigError as error:
        typer.echo(f"aptix worker: {error}", err=True)
        return 2
    try:
        running = await durable_worker(
            service, pipeline, identity=identity, max_concurrent_turns=concurrency
        )
    except (RuntimeError, OSError) as error:
        typer.echo(f"aptix worker: cannot reach Temporal at {temporal.address}: {error}", err=True)
        # temporalio's native runtime, left with a failed connection, can abort the
        # interpreter's shutdown (SIGABRT in its protobuf module): nothing was started or
        # written, so the process ends here with its one line and exit 1.
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(1)
    except TypeError as error:  # a store that cannot run durable turns (no atomic apply)
        typer.echo(f"aptix worker: {error}", err=True)
        return 2
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    serving = asyncio.create_task(running.run())
    stopping = asyncio.create_task(stop.wait())
    try:
        typer.echo(
            f"aptix worker: ready: {running.identity} runs turns from task queue "
            f"{temporal.task_queue!r} of namespace {temporal.namespace!r} at {temporal.address}",
            err=True,
        )
        await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if serving.done():  # the worker stopped by itself: Temporal refused it
            failure = serving.exception()
            typer.echo(f"aptix worker: stopped: {type(failure).__name__}: {failure}", err=True)
            return 1
        typer.echo("aptix worker: stopping (turns in flight finish)", err=True)
        await running.shutdown()
        await asyncio.gather(serving, return_exceptions=True)
    finally:
        stopping.cancel()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
        if provider is not None:
            provider.shutdown()
    return 0


# --- The socket a command that serves listens on (D392) ---------------------------------


def listen(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host``:``port`` and listening; ``OSError`` (its reason
    in words, e.g. "the address is in use") when it cannot be."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        sock.bind((host.strip("[]"), port))
        sock.listen(2048)
    except OSError as error:
        sock.close()
        raise OSError(error.errno, _reason(error)) from None
    return sock


def check_free(host: str, port: int) -> None:
    """Whether ``host``:``port`` can be listened on now: ``OSError`` as ``listen`` when not."""
    listen(host, port).close()


def _reason(error: OSError) -> str:
    if isinstance(error, socket.gaierror):
        return f"unknown host ({error.strerror})"
    if error.errno == errno.EADDRINUSE:
        return "the address is in use (another program listens there)"
    return error.strerror or str(error)
