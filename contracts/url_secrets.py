"""Credentials in URLs, masked wherever a URL can surface (decision D220).

A model endpoint or a store URL may carry a secret: ``http://user:pw@host/v1``,
``https://host/v1?api-key=…``, ``postgresql://app:pw@db/aptix``. Exception text from
httpx, openai and psycopg quotes such URLs; ``scrub_urls`` masks them inside any text
so an error message, a log line, a span attribute or a recording never echoes them.

What is masked (``***``):

- the userinfo of any ``scheme://userinfo@host`` — user and password alike;
- the value of a query or fragment parameter (``?``, ``&``, ``;``, ``#`` before it)
  whose name, lower-cased, percent-decoded and with ``-``/``_`` removed, is in
  ``SECRET_PARAMETERS`` or ends with one of ``SECRET_SUFFIXES``;
- the value of a libpq key/value ``password=…`` (``passwd``, ``pwd``) word.

This module imports nothing of ours, so every layer may use it (DESIGN.md "Layout
and layers").
"""

from __future__ import annotations

import logging
import re
from urllib.parse import unquote

__all__ = [
    "MASK",
    "SECRET_PARAMETERS",
    "SECRET_SUFFIXES",
    "ScrubbingFilter",
    "is_secret_name",
    "scrub_logger",
    "scrub_urls",
    "scrubbed_logger",
]

MASK = "***"

SECRET_PARAMETERS = frozenset(
    {
        "auth",
        "authorization",
        "code",
        "credential",
        "credentials",
        "key",
        "pass",
        "passwd",
        "password",
        "pwd",
        "secret",
        "session",
        "sessionid",
        "sig",
        "signature",
        "token",
    }
)
"""Parameter names (normalized: lower case, no ``-``/``_``) whose value is masked."""

SECRET_SUFFIXES = ("key", "token", "secret", "password", "signature", "credential", "credentials")
"""A normalized name ending with one of these is masked too (``apikey``, ``accesstoken``,
``clientsecret``, ``xamzsignature``, ``ocpapimsubscriptionkey``…)."""

# scheme://userinfo@ — greedy up to the last "@" of the authority (a raw "@" in a
# password), never past "/", "?", "#" or a space.
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)[^/?#\s@]*(?:@[^/?#\s@]*)*@")
_PARAMETER = re.compile(r"(?P<lead>[?&;#])(?P<name>[^=&;#?\s'\"<>]+)=(?P<value>[^&;#\s'\"<>)]*)")
_CONNINFO = re.compile(
    r"(?P<lead>(?:^|[\s'\"(]))(?P<name>password|passwd|pwd)\s*=\s*(?P<value>'(?:[^'\\]|\\.)*'|[^\s'\"]+)",
    re.IGNORECASE,
)


def is_secret_name(name: str) -> bool:
    """Whether a parameter called ``name`` holds a secret (see the module docstring)."""
    normal = unquote(name).lower().replace("-", "").replace("_", "")
    return normal in SECRET_PARAMETERS or normal.endswith(SECRET_SUFFIXES)


def _parameter(match: re.Match[str]) -> str:
    if not is_secret_name(match["name"]) or not match["value"]:
        return match[0]
    return f"{match['lead']}{match['name']}={MASK}"


def scrub_urls(text: str) -> str:
    """``text`` with URL credentials and secret parameters masked (module docstring)."""
    if "@" in text:
        text = _USERINFO.sub(lambda m: f"{m['scheme']}{MASK}@", text)
    if "=" in text:
        text = _PARAMETER.sub(_parameter, text)
        text = _CONNINFO.sub(lambda m: f"{m['lead']}{m['name']}={MASK}", text)
    return text


class ScrubbingFilter(logging.Filter):
    """A logging filter that passes every record with its message, traceback and stack
    run through ``scrub_urls``.

    Attach it to a logger that may print URLs: httpx logs each request's full URL,
    userinfo and query included, and the engine's own log carries the traceback of
    a step that raised, whose message may quote a port's URL
    (``logger.addFilter(ScrubbingFilter())``). The traceback is formatted here, once,
    into ``record.exc_text``, which the standard ``logging.Formatter`` prints as is.
    """

    _formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        scrubbed = scrub_urls(message)
        if scrubbed != message:
            record.msg, record.args = scrubbed, None
        if record.exc_info and not record.exc_text:
            record.exc_text = self._formatter.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = scrub_urls(record.exc_text)
        if record.stack_info:
            record.stack_info = scrub_urls(record.stack_info)
        return True


def scrub_logger(logger: logging.Logger) -> logging.Logger:
    """``logger`` with one ``ScrubbingFilter`` (added once, however often this is called)."""
    if not any(isinstance(existing, ScrubbingFilter) for existing in logger.filters):
        logger.addFilter(ScrubbingFilter())
    return logger


def scrubbed_logger(name: str) -> logging.Logger:
    """The logger called ``name``, with a ``ScrubbingFilter``: each module of the package
    logs through ``scrubbed_logger(__name__)``.

    A logger's filters see only the records logged to that logger, not those its
    children hand up to it, so a filter on the ``aptix_pipeline`` logger would miss
    every record of ``aptix_pipeline.engine.runner``; each module's own logger carries
    one instead. Handlers stay the host's: nothing is added to them.
    """
    return scrub_logger(logging.getLogger(name))
