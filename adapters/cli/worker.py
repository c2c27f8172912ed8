"""``aptix worker --config FILE``: a worker of durable turns (docs/DURABLE.md).

It builds the pipeline ``aptix serve`` builds from the same file (store, catalog,
model, server tools, MCP servers, ``[host] extension``, recording, retrieval,
files) and runs its turns from ``[temporal]``'s task queue as a ``DurableWorker``
until SIGINT or SIGTERM, then stops taking work, lets what runs finish (up to
5 s: a turn cut off is finished by another worker) and exits 0. One line on
stderr says it is ready. A bad file, a file without ``[temporal]``, or a missing
``temporal`` extra is a usage error (exit 2, one line); a Temporal that cannot be
reached is exit 1, one line.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from aptix_pipeline.adapters.config import ServiceConfig

__all__ = ["worker"]

_EXTRA = "pip install 'aptix-pipeline[{}]'"


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


def _refuse(message: str, code: int = 2) -> typer.Exit:
    """Say what is wrong on stderr in one line; the exit to raise."""
    typer.echo(f"aptix worker: {message}", err=True)
    return typer.Exit(code)


def _workable_config(config: Path) -> ServiceConfig:
    """The configuration, loaded; refused without ``[temporal]``, ``[model]`` or the extra."""
    from importlib.util import find_spec

    from aptix_pipeline.adapters.config import ConfigError, load_service_config

    if find_spec("temporalio") is None:
        raise _refuse(f"needs temporalio: {_EXTRA.format('temporal')}")
    try:
        service = load_service_config(config, secrets_for=("store", "model", "files"))
    except ConfigError as error:
        raise _refuse(str(error)) from None
    if service.temporal is None:
        service.close()
        raise _refuse(f"{config}: a [temporal] table is required to run a worker")
    if service.model is None:
        service.close()
        raise _refuse(f"{config}: a [model] table is required to run a worker")
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
        return 1
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
