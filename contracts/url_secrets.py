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
- the value of a libpq key/value ``password=…`` (``passwd``, ``pwd``) word;
- each secret an adapter registered with ``mask_everywhere`` (a model's API key)
  or ``mask_url_everywhere`` (the parts of its base URL no pattern can tell apart
  from an ordinary path: ``https://host/v1/KEY123/`` → ``https://host/v1/***/``),
  D402.

The registered secrets are process-wide: the HTTP client's request log and an
exception's text cannot say which adapter they are about. Only secrets of
``MIN_SECRET_CHARS`` or more are registered (a two-letter placeholder key would
mask ordinary words); an adapter masks its shorter ones in its own messages, as
whole words only (``scrub_secret``). The table only grows: a process configures
few models.

This module imports nothing of ours, so every layer may use it (DESIGN.md "Layout
and layers").
"""

from __future__ import annotations

import logging
import re
import threading
from urllib.parse import unquote, urlsplit

__all__ = [
    "MASK",
    "MIN_SECRET_CHARS",
    "SECRET_PARAMETERS",
    "SECRET_SUFFIXES",
    "ScrubbingFilter",
    "is_secret_name",
    "mask_everywhere",
    "mask_url_everywhere",
    "scrub_logger",
    "scrub_secret",
    "scrub_urls",
    "scrubbed_logger",
    "shown_url",
]

MASK = "***"
MIN_SECRET_CHARS = 8
"""The shortest secret masked wherever it appears, even inside a longer word."""

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


class _Registered:
    """The secrets ``mask_everywhere`` registered, longest first, as ``(secret, shown)``.

    Replaced whole under a lock, so ``scrub_urls`` reads one tuple without a lock.
    """

    def __init__(self) -> None:
        self.pairs: tuple[tuple[str, str], ...] = ()
        self.lock = threading.Lock()

    def add(self, secret: str, shown: str) -> None:
        with self.lock:
            if any(known == secret for known, _ in self.pairs):
                return
            self.pairs = tuple(sorted((*self.pairs, (secret, shown)), key=lambda p: -len(p[0])))


_REGISTERED = _Registered()


def mask_everywhere(secret: str, shown: str = MASK) -> bool:
    """Make ``scrub_urls`` replace ``secret`` with ``shown`` wherever it appears, from now
    on, in this process; whether it was registered (``MIN_SECRET_CHARS`` or more, and
    not ``shown`` itself)."""
    if len(secret) < MIN_SECRET_CHARS or shown == secret or secret in shown:
        return False
    _REGISTERED.add(secret, shown)
    return True


# A path segment shown as it is: a version (v1, v1beta, v2alpha1) or a lower-case word
# (openai, chat, compatible-mode); anything else may be a key or an account id.
_PLAIN_SEGMENT = re.compile(r"v[0-9]+(?:[a-z]+[0-9]*)?|[a-z]{1,24}(?:[-_.][a-z]{1,24}){0,3}")


def shown_url(url: str) -> str:
    """``url`` as an error may name it: its userinfo, each path segment that is not a
    version or a lower-case word, each query value and its fragment masked
    (``https://u:p@host/v1/KEY123/?deployment=x#t`` → ``https://***@host/v1/***/?deployment=***#***``).
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return MASK
    host = parts.netloc.rpartition("@")[2]
    netloc = f"{MASK}@{host}" if "@" in parts.netloc else host
    path = "/".join(
        segment if not segment or _PLAIN_SEGMENT.fullmatch(segment) else MASK
        for segment in parts.path.split("/")
    )
    query = "&".join(
        f"{name}={MASK}" if sep else name
        for name, sep, _ in (item.partition("=") for item in parts.query.split("&"))
    )
    shown = f"{parts.scheme}://{netloc}{path}" if parts.scheme else f"{netloc}{path}"
    if parts.query:
        shown += f"?{query}"
    if parts.fragment:
        shown += f"#{MASK}"
    return shown


def mask_url_everywhere(url: str) -> str:
    """Register the parts of ``url`` that ``shown_url`` masks but ``scrub_urls``' patterns
    would not (a secret path segment, a query, a fragment) with ``mask_everywhere``, as
    they appear in other URLs and in a server's messages; ``url`` as ``shown_url`` shows it.
    """
    shown = shown_url(url)
    try:
        raw, masked = urlsplit(url), urlsplit(shown)
    except ValueError:
        return shown
    for secret, instead in (
        (url, shown),
        (url.rstrip("/"), shown.rstrip("/")),
        (raw.path.rstrip("/"), masked.path.rstrip("/")),
        (f"?{raw.query}", f"?{masked.query}"),
        (f"#{raw.fragment}", f"#{masked.fragment}"),
    ):
        if secret != instead:
            mask_everywhere(secret, instead)
    for segment, instead in zip(raw.path.split("/"), masked.path.split("/"), strict=False):
        if segment != instead:
            mask_everywhere(segment)
    return shown


def scrub_secret(text: str, secret: str) -> str:
    """``text`` with ``secret`` masked: wherever it appears when it is ``MIN_SECRET_CHARS``
    or longer, else only where it stands as a word of its own (a key ``k`` is masked in
    ``Bearer k``, never inside ``api-key``)."""
    if not secret or secret not in text:
        return text
    if len(secret) >= MIN_SECRET_CHARS:
        return text.replace(secret, MASK)
    return re.sub(rf"(?<![\w\-]){re.escape(secret)}(?![\w\-])", MASK, text)


def scrub_urls(text: str) -> str:
    """``text`` with URL credentials, secret parameters and registered secrets masked
    (module docstring)."""
    for secret, shown in _REGISTERED.pairs:
        if secret in text:
            text = text.replace(secret, shown)
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
