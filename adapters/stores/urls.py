"""A store from its URL: ``memory``, ``sqlite:PATH``, a ``.db`` path or ``postgresql://``.

``open_store`` is how every front door (``aptix run``, ``aptix serve``, the turn
browser, ``embedded_pipeline(store=...)``) turns the text a user wrote into a store;
a misspelt scheme is refused rather than taken for a file name (D375).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from .memory import MemoryStore
from .sqlite import SQLiteStore, Synchronous, synchronous_mode

if TYPE_CHECKING:
    from .postgres import PostgresStore

__all__ = ["DEFAULT_STORE_URL", "open_store", "sqlite_target", "unknown_store_scheme"]


DEFAULT_STORE_URL = "sqlite:aptix.db"
"""A SQLite file in the working directory, for a host that wants its store beside its
process (also ``service_config.DEFAULT_STORE_URL``). ``aptix run`` and a configuration
without a ``[store]`` table use the data folder's file instead (``config/data_dir.py``)."""


_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]+):")
"""A URL scheme: two characters or more, so a Windows drive letter (``C:``) is none."""

_KNOWN_STORES = "memory, sqlite:PATH or postgresql://USER@HOST/DB"


def unknown_store_scheme(spec: str) -> str | None:
    """The scheme ``spec`` starts with when it is none a store knows (``sqllite:x.db``
    gives ``"sqllite"``), else ``None`` (D375)."""
    match = _SCHEME.match(spec)
    if match is None or match.group(1) in ("sqlite", "postgresql", "postgres"):
        return None
    return match.group(1)


def sqlite_target(spec: str) -> tuple[str, Synchronous]:
    """``sqlite:PATH[?synchronous=normal|full]`` → the path and the durability setting.

    ``synchronous`` (stores/sqlite.py) defaults to ``normal``; an unknown option or a
    bad value is a ``ValueError`` naming the option.
    """
    path, _, query = spec.removeprefix("sqlite:").partition("?")
    if not path:
        raise ValueError("sqlite: needs a file path, e.g. sqlite:aptix.db")
    synchronous: Synchronous = "normal"
    for pair in query.split("&") if query else ():
        key, _, value = pair.partition("=")
        if key != "synchronous":
            raise ValueError(f"unknown sqlite: option {key!r}; known: synchronous")
        synchronous = synchronous_mode(value, option="sqlite: option synchronous")
    return path, synchronous


def open_store(spec: str | Path) -> MemoryStore | SQLiteStore | PostgresStore:
    """A store from its spec: ``memory``, ``sqlite:PATH`` (with options:
    ``sqlite:PATH?synchronous=full``, see ``sqlite_target``), a ``.db``/``.sqlite`` path,
    or a PostgreSQL URL (``postgresql://user:password@host:5432/db``, also ``postgres://``).

    The PostgreSQL store needs the ``postgres`` extra; it is imported only when asked for.
    """
    text = str(spec)
    if text == "memory":
        return MemoryStore()
    if text.startswith(("postgresql://", "postgres://")):
        try:
            from .postgres import PostgresStore
        except ImportError as error:
            raise RuntimeError(
                "a postgresql:// store needs psycopg: pip install 'aptix-pipeline[postgres]' "
                f"({error})"
            ) from None
        return PostgresStore(text)
    if text.startswith("sqlite:"):
        path, synchronous = sqlite_target(text)
        return SQLiteStore(path, synchronous=synchronous)
    scheme = unknown_store_scheme(text)
    if scheme is not None:  # a misspelt scheme, not a file name to create
        raise ValueError(f"unknown store scheme {scheme + ':'!r}: use {_KNOWN_STORES}")
    if text.endswith((".db", ".sqlite", ".sqlite3")):
        return SQLiteStore(text)
    shown = f"{text.partition('://')[0]}://..." if "://" in text else text  # no credentials
    raise ValueError(f"unknown store {shown!r}: use {_KNOWN_STORES}")
