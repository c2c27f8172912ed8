"""The socket a command that serves listens on, bound before it says it is serving (D392).

``aptix ui`` binds its socket here and hands it to uvicorn, so a port another
program holds is refused in one line (exit 2) before anything says "serving", and
``--port 0`` serves on the free port the system picks, which is the one printed.
``aptix serve``, whose workers each bind their own socket, asks ``check_free`` first.
"""

from __future__ import annotations

import errno
import socket

__all__ = ["check_free", "listen"]


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
