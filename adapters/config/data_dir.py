"""Where ``aptix`` keeps its sessions when it is not told: a data folder, not the working one.

A turn stores its session (AGN-033 §3.1) in the store the caller names
(``--store``, a configuration's ``[store]``). Without one, ``aptix run``, ``aptix
chat`` and a configuration without ``[store]`` (``aptix serve``) use the SQLite file
``aptix.db`` in the data folder (docs/CLI.md "Where sessions are kept", D366):

- ``$APTIX_DATA_DIR`` when set;
- else ``$XDG_DATA_HOME/aptix`` when ``XDG_DATA_HOME`` is an absolute path (the XDG
  Base Directory rule: a relative one is ignored);
- else ``~/.local/share/aptix``.

The folder is made when first needed; the file's creation is said on stderr once,
so a user learns where their sessions went.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Final, TextIO

__all__ = ["DATA_DIR_ENV", "data_dir", "default_store_path", "default_store_url"]

DATA_DIR_ENV: Final = "APTIX_DATA_DIR"
"""The environment variable naming the data folder outright."""

_STORE_FILE: Final = "aptix.db"


def data_dir(env: Mapping[str, str] | None = None) -> Path:
    """The data folder, as the module docstring says; ``env`` defaults to ``os.environ``."""
    environment = os.environ if env is None else env
    chosen = environment.get(DATA_DIR_ENV, "").strip()
    if chosen:
        return Path(chosen).expanduser()
    xdg = environment.get("XDG_DATA_HOME", "").strip()
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "aptix"
    home = environment.get("HOME", "").strip()
    return (Path(home) if home else Path.home()) / ".local" / "share" / "aptix"


def default_store_path(env: Mapping[str, str] | None = None) -> Path:
    """The default SQLite file: ``aptix.db`` in the data folder."""
    return data_dir(env) / _STORE_FILE


def default_store_url(
    *, env: Mapping[str, str] | None = None, announce: TextIO | None = None
) -> str:
    """``sqlite:PATH`` of the default store, its folder made; when the file does not exist
    yet, one line on ``announce`` (default: ``sys.stderr``) says where it is being created.

    Raises ``OSError`` when the folder cannot be made.
    """
    path = default_store_path(env)
    path.parent.mkdir(parents=True, exist_ok=True)
    announce = sys.stderr if announce is None else announce
    if not path.exists():
        announce.write(
            f"aptix: creating the session store {path} "
            f"(--store, or {DATA_DIR_ENV}, to keep sessions elsewhere)\n"
        )
        announce.flush()
    return f"sqlite:{path}"
