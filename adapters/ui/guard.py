"""Who may open the standalone turn browser (``aptix ui``): the host names it answers to
and the token of its start (docs/UI.md "Who may open it", D415, D416).

The standalone page shows every org's sessions, so a page that any web site could
read would hand them to a site the operator visits, through DNS rebinding: the
site's own name is made to resolve to 127.0.0.1, and the browser then lets the
site's script read the page as its own origin. Two checks close that:

- the ``Host`` a request names must be a loopback name (``localhost``, an address in
  127.0.0.0/8, ``::1``, written ``[::1]``), with any port, or a name the operator
  allowed (``aptix ui --allow-host NAME``); a rebound name is none of these;
- the request must carry the token of this start: ``?token=`` in the URL ``aptix ui``
  prints, or the cookie the first visit with it sets (HttpOnly, SameSite=Strict),
  as a Jupyter server does. A token is ``secrets.token_urlsafe``, compared in
  constant time.

Nothing here imports Starlette: ``aptix ui`` checks its options with it before the
``http`` extra is loaded.
"""

from __future__ import annotations

import hmac
import ipaddress
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

__all__ = [
    "LOOPBACK_NAMES",
    "TOKEN_PARAM",
    "UIGuard",
    "allowed_host_name",
    "host_of",
    "is_loopback",
]

TOKEN_PARAM: Final = "token"
"""The query parameter the printed URL carries the token in."""
LOOPBACK_NAMES: Final = ("localhost", "127.0.0.1", "[::1]")
"""How the refusal names the loopback host names (any 127.0.0.0/8 address is one too)."""
_LABEL = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
_NAME = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*$")
_HOST_HEADER = re.compile(r"^(?:\[(?P<ipv6>[0-9a-fA-F:.]+)\]|(?P<name>[^:\[\]]+))(?::\d{1,5})?$")


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


def host_of(header: str | None) -> str | None:
    """The host name of a ``Host`` header, lower-cased, without its port or an IPv6
    address's brackets; ``None`` when there is none or it is not a ``host[:port]``."""
    if header is None:
        return None
    found = _HOST_HEADER.match(header.strip())
    if found is None:
        return None
    if found["ipv6"] is not None:
        try:
            return str(ipaddress.IPv6Address(found["ipv6"]))
        except ValueError:
            return None
    return found["name"].lower()


def allowed_host_name(name: str) -> str:
    """``name`` as a host name the page may be asked for (``--allow-host``): a DNS name
    or an IP address, lower-cased, an IPv6 address without brackets; ``ValueError``
    saying why when it is anything else (a scheme, a port, a path, a pattern)."""
    given = name.strip().lower()
    bare = given[1:-1] if given.startswith("[") and given.endswith("]") else given
    try:
        return str(ipaddress.ip_address(bare))
    except ValueError:
        pass
    if _NAME.match(given) is None:
        raise ValueError(
            f"{name!r} is not a host name: give a name or an address alone, "
            "without a scheme, port, path or wildcard (e.g. aptix.example.lan)"
        )
    return given


@dataclass(frozen=True, slots=True)
class UIGuard:
    """The standalone page's checks (module docstring): this start's ``token`` and the
    ``allowed_hosts`` it answers to besides the loopback names (as ``allowed_host_name``
    gives them). ``UIGuard.start()`` makes one with a new token."""

    token: str = field(repr=False)
    allowed_hosts: frozenset[str] = frozenset()

    @classmethod
    def start(cls, allowed_hosts: Iterable[str] = ()) -> UIGuard:
        """A guard with a new token (``secrets.token_urlsafe``, 256 bits)."""
        return cls(
            token=secrets.token_urlsafe(32),
            allowed_hosts=frozenset(allowed_host_name(name) for name in allowed_hosts),
        )

    def host_allowed(self, header: str | None) -> bool:
        """Whether a request whose ``Host`` header is ``header`` may be answered."""
        host = host_of(header)
        return host is not None and (is_loopback(host) or host in self.allowed_hosts)

    def token_matches(self, presented: str | None) -> bool:
        """Whether ``presented`` is this start's token, compared in constant time."""
        if not presented:
            return False
        return hmac.compare_digest(presented.encode("utf-8"), self.token.encode("utf-8"))
