"""``aptix serve --config FILE``: the HTTP service (``http/app.py``) under uvicorn.

Every worker process builds its own app from the same file (``create_app()`` reads
the path from ``$APTIX_CONFIG``). ``--host``, ``--port``, ``--workers`` and
``--access-log`` override ``[server]``. A configuration that cannot serve (no
``[model]``, no ``[[auth.keys]]``, a ``[retrieval]`` index not built) or a missing
``http`` extra is a usage error (exit code 2).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from .listen import check_free

if TYPE_CHECKING:
    from aptix_pipeline.adapters.config import ServiceConfig

__all__ = ["serve"]

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
) -> None:
    """Serve POST /v1/agent/execute over HTTP (uvicorn) with the configuration's model and store."""
    _need_http_extra()
    service = _servable_config(config)
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
