"""Who calls the HTTP service: the ``Authenticator`` port and its API-key default.

An ``Authenticator`` turns a request's headers into the caller, or refuses (401);
the default, ``ApiKeyAuthenticator``, reads the ``[[auth.keys]]`` of the
configuration from ``Authorization: Bearer KEY`` or ``X-API-Key``. Anything but a
``Caller`` refuses the request (docs/CONFORMANCE.md D86).
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
from collections.abc import Awaitable, Iterable, Mapping
from typing import Protocol

from aptix_pipeline.adapters.config import ApiKey
from aptix_pipeline.contracts import Caller

__all__ = ["API_KEY_HEADER", "ApiKeyAuthenticator", "Authenticator", "authenticated_caller"]

API_KEY_HEADER = "X-API-Key"
"""The header ``ApiKeyAuthenticator`` reads a key from when ``Authorization`` has none."""


class Authenticator(Protocol):
    """Who is calling: the request's headers → the caller, or ``None`` to refuse (401).

    ``headers`` is case-insensitive (Starlette's ``Headers``). Implementations may
    be plain or ``async`` methods.
    """

    def authenticate(self, headers: Mapping[str, str]) -> Caller | Awaitable[Caller | None] | None:
        """The caller, or ``None`` when the request does not say who it is."""


class ApiKeyAuthenticator:
    """API keys mapped to an org and user (``[[auth.keys]]``); the default ``Authenticator``.

    The key is read from ``Authorization: Bearer KEY``, else from ``X-API-Key``. Only
    SHA-256 digests are kept; the presented key's digest is compared with every
    configured one in constant time, so timing tells nothing about which matched.
    """

    def __init__(self, keys: Iterable[ApiKey]) -> None:
        self._keys = tuple(keys)

    @staticmethod
    def presented_key(headers: Mapping[str, str]) -> str | None:
        """The key a request presents, or ``None``."""
        scheme, _, token = (headers.get("authorization") or "").strip().partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
        key = (headers.get(API_KEY_HEADER.lower()) or "").strip()
        return key or None

    def authenticate(self, headers: Mapping[str, str]) -> Caller | None:
        """The caller whose key the request presents, else ``None``."""
        key = self.presented_key(headers)
        if key is None:
            return None
        digest = hashlib.sha256(key.encode()).digest()
        found: ApiKey | None = None
        for candidate in self._keys:  # no early exit: every key is compared
            if hmac.compare_digest(digest, candidate.sha256):
                found = candidate
        return None if found is None else Caller(org=found.org, user=found.user)


async def authenticated_caller(
    authenticator: Authenticator, headers: Mapping[str, str]
) -> Caller | None:
    """The caller ``authenticator`` names for these headers, plain or awaited; else ``None``.

    Whatever the authenticator answers that is not a ``Caller`` refuses the request.
    """
    outcome = authenticator.authenticate(headers)
    caller = await outcome if inspect.isawaitable(outcome) else outcome
    return caller if isinstance(caller, Caller) else None
