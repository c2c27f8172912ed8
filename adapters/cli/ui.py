"""``aptix ui [--store URL] [--config FILE] [--recordings DIR] [--evals DIR]
[--host 127.0.0.1] [--port N] [--allow-host NAME]``: the turn browser.

Serves the page of ``ui/app.py`` (docs/UI.md) under uvicorn for the operator of a
store: every org and user's sessions, the recordings of a folder, and the eval
reports of a folder (``aptix eval --html``, at ``/evals``). It asks for
no key, so it listens on loopback only: a ``--host`` that is not a loopback
address is refused unless ``--allow-remote`` says so. Each start makes a token
(``ui/guard.py``, D416): the URL it prints carries it (``/?token=…``), and the page
answers only a browser that gave it; it answers only requests naming a loopback
host, the ``--host`` it listens on, or a name ``--allow-host`` gives (D415). The
store is opened for browsing (``stores/browse.py``: never created); without
``--store`` the configuration's ``[store]`` is shown, else the default store when
its file exists. ``--config`` (the service's TOML) gives the page its
``[[budgets]]``: a session's page shows what each has left (D677); without it the
page says no budgets are configured. A session's fork button forks in the browsed
store as the session's org and user (``fork_session``, what ``Pipeline.fork`` and
``aptix fork`` run, D675). Exit codes: 2 for a
usage error (a store that is missing, unknown or unreachable, a folder that does
not exist, nothing to show, a non-loopback host, an ``--allow-host`` that is not a
host name, a port another program holds, a configuration that does not load, the
``http`` extra missing). The socket
is bound before the page says where it serves (``listen.py``).
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Annotated

import typer

from .run import COMMAND_NAME, ConfigOption, load_config
from .serve import listen

__all__ = ["DEFAULT_UI_PORT", "ui"]

DEFAULT_UI_PORT = 8090


def _refuse(message: str) -> typer.Exit:
    typer.echo(f"aptix ui: {message}", err=True)
    return typer.Exit(2)


def _is_wildcard(host: str) -> bool:
    """Whether ``host`` is "every interface" (``0.0.0.0``, ``::``), which no URL can name."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return False


def _shown_host(host: str) -> str:
    """How the printed URL names ``host``: a wildcard as the loopback address of its family."""
    if _is_wildcard(host):
        host = "::1" if ":" in host else "127.0.0.1"
    return f"[{host.strip('[]')}]" if ":" in host else host


def ui(
    store: Annotated[
        str | None,
        typer.Option(help="The store: sqlite:PATH or postgresql://USER@HOST/DB."),
    ] = None,
    config: ConfigOption = None,
    recordings: Annotated[
        Path | None,
        typer.Option(file_okay=False, help="A folder of turn recordings (aptix run --record)."),
    ] = None,
    evals: Annotated[
        Path | None,
        typer.Option(
            "--evals", file_okay=False, help="A folder of eval reports (aptix eval --html)."
        ),
    ] = None,
    host: Annotated[str, typer.Option(help="Interface (loopback unless --allow-remote).")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option(min=0, max=65535, help="TCP port.")] = DEFAULT_UI_PORT,
    allow_remote: Annotated[
        bool,
        typer.Option(
            "--allow-remote",
            help="Listen on a non-loopback --host: anyone who reaches it and has the token "
            "sees every session.",
        ),
    ] = False,
    allow_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-host",
            metavar="NAME",
            help="A host name the page also answers to (besides localhost, 127.0.0.1, "
            "\\[::1] and --host); repeat for more.",
        ),
    ] = None,
) -> None:
    """Serve the turn browser page: sessions, recordings, a turn's path, timeline and replay."""
    from aptix_pipeline.adapters.ui import allowed_host_name, is_loopback

    if not is_loopback(host) and not allow_remote:
        raise _refuse(
            f"--host {host} is not a loopback address: the page shows every session to "
            "whoever has its token; add --allow-remote to listen there anyway"
        )
    # the address it listens on is a name its URL gives, so the page answers to it too
    given = [("--allow-host", name) for name in allow_host or []]
    if not is_loopback(host) and not _is_wildcard(host):
        given.append(("--host", host))
    names: list[str] = []
    for option, name in given:
        try:
            names.append(allowed_host_name(name))
        except ValueError as error:
            raise _refuse(f"{option} {error}") from None
    if recordings is not None and not recordings.is_dir():
        raise _refuse(f"--recordings {recordings}: no such folder")
    if evals is not None and not evals.is_dir():
        raise _refuse(f"--evals {evals}: no such folder")
    try:
        import uvicorn

        from aptix_pipeline.adapters.config import default_store_path
        from aptix_pipeline.adapters.stores import (
            BrowseStoreError,
            close_browse_store,
            open_browse_store,
        )
        from aptix_pipeline.adapters.system import RandomIds, SystemClock
        from aptix_pipeline.adapters.ui import UIGuard, create_ui_app
        from aptix_pipeline.contracts import (
            Caller,
            InvokeResult,
            Session,
            SessionStore,
            scrub_urls,
        )
        from aptix_pipeline.engine import fork_session
    except ImportError as error:
        raise _refuse(f"{error}; install aptix-pipeline[http]") from None
    COMMAND_NAME.set("ui")
    service = load_config(config, model=False, store=store is None)
    spec = store or (service.store_url if service is not None else None)
    if spec is None and default_store_path().is_file():  # where aptix run keeps sessions
        spec = f"sqlite:{default_store_path()}"
    if spec is None and recordings is None and evals is None:
        raise _refuse("nothing to show: give --store, --recordings and/or --evals")
    opened = None
    if spec is not None:
        try:
            opened = open_browse_store(spec)
        except BrowseStoreError as error:
            raise _refuse(str(error)) from None

    async def close() -> None:
        if opened is not None:
            await close_browse_store(opened)

    forks = opened if isinstance(opened, SessionStore) else None

    async def fork(session_id: str, turn_id: str, caller: Caller) -> InvokeResult[Session]:
        assert forks is not None  # the page has no fork button without a store
        return await fork_session(forks, RandomIds(), SystemClock(), session_id, turn_id, caller)

    guard = UIGuard.start(names)
    app = create_ui_app(
        opened,
        recordings,
        store_name=scrub_urls(spec) if spec is not None else None,
        guard=guard,
        close_store=close,
        evals=evals,
        fork=fork if forks is not None else None,
        budgets=service.options.budgets if service is not None else None,
    )
    try:
        sock = listen(host, port)
    except OSError as error:
        raise _refuse(f"--host {host} --port {port}: {error.strerror}") from None
    with sock:
        bound = sock.getsockname()[1]
        url = f"http://{_shown_host(host)}:{bound}/?token={guard.token}"
        typer.echo(f"aptix ui: the turn browser on {url} (Ctrl+C stops it)")
        uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
