"""The one TOML file ``aptix run`` and ``aptix serve`` share.

It is the catalog file ``ConfigCatalog`` reads (``[[modes]]``, ``[[server_tools]]``,
``[[agents]]``, ``[[conversations]]``; without them the built-in catalog, minus its
agent's placeholder model name so that ``[model]`` decides), plus tables of
its own, each optional:

- ``[store]`` — ``url`` (``memory``, ``sqlite:PATH``, ``postgresql://user@host/db``)
  or ``url_env`` (an environment variable holding it); ``password_env`` puts a
  PostgreSQL password from the environment into the URL; ``synchronous``
  (``"normal"``, the default, or ``"full"``) is a SQLite store's durability
  (``adapters/stores/sqlite.py``), also written ``sqlite:PATH?synchronous=full``.
- ``[model]`` — ``kind = "scripted"`` with ``script = "replies.json"``, or
  ``kind = "openai"`` with ``model``, ``base_url``, ``api_key_env``,
  ``timeout_seconds``, ``max_attempts``, ``max_total_seconds``, ``max_reply_bytes``.
- ``[server]`` — ``host``, ``port``, ``workers``, ``max_body_bytes``, ``access_log``
  (uvicorn's line per request; off by default, it costs the worker CPU per turn),
  ``read_timeout_seconds`` (the time a client has to send a whole request; 0: none),
  ``sse_keepalive_seconds`` (the most a streamed answer stays silent: a keep-alive
  comment is sent after that long without an event; more than 0).
- ``[auth]`` — ``[[auth.keys]]`` mapping an API key to an ``org`` and ``user``; the
  key comes from ``key_env`` (an environment variable) or is given only as its
  SHA-256 (``key_sha256``), so the file never holds a clear key.
- ``[engine]`` — ``PipelineOptions`` (``max_server_tool_rounds``, ``llm_attempts``,
  ``retry_wait_seconds``, ``retry_max_wait_seconds``, and the limits
  ``turn_deadline_seconds``, ``server_tool_timeout_seconds`` (0 turns either off),
  ``max_model_reply_chars``, ``max_transcript_messages``, ``transcript_policy``,
  ``max_json_depth``, ``max_errors``, ``max_input_artifacts``, ``max_clipboard_images``,
  ``max_tool_results``, ``max_images``, ``max_image_bytes``, ``max_total_image_bytes``),
  and ``idempotency_ttl_seconds``, how long a committed turn's answer is kept for
  retries (0 keeps it for good); ``tool_ledger``, ``tool_ledger_ttl_seconds`` (0
  keeps entries for good) and ``possibly_executed_policy`` (server-tool calls
  through the store's tool ledger, docs/TOOLS.md); ``usage_ledger``,
  ``max_output_tokens`` and ``output_tokens_estimate`` (each model call's usage kept
  and reserved against budgets, docs/BUDGETS.md); ``keep_traces`` and
  ``trace_ttl_seconds`` (0 keeps them for good): every turn's kept trace, docs/UI.md.
- ``[prices]`` and ``[[budgets]]`` — the ``PriceTable`` and the ``Budget``s of
  ``PipelineOptions`` (``config/spending.py``, docs/BUDGETS.md), amounts exact.
- ``[host]`` — ``extension``, ``module:attribute`` naming a ``HostExtension``: the
  host's rules, hooks, listeners and server tools, for every command and the
  service (``config/host.py``, docs/EXTENDING.md "Your code in the service").
- ``[chat]`` — ``handlers``, a table of client tool name → command: ``aptix chat``
  runs the command for each call of that tool instead of asking (``cli/chat.py``).
- ``[recording]`` — record every turn for replay (``engine/replay/recording.py``):
  ``directory`` (one file per turn) and ``redact`` (drop user content), which
  must be given: whether production recordings hold user content is a decision.
- ``[files]`` — keep the files server tools return in a ``LocalFileStore``
  (``adapters/files/local.py``, docs/FILES.md): ``directory``, ``url_base`` (the
  service's public address, e.g. ``https://aptix.example.com``), ``ttl_seconds``
  (how long a file's URL works; default 3600) and ``signing_key_env`` (an
  environment variable holding the URL signing key, 16 bytes or more; every worker
  must share it). Without ``[files]`` a tool that returns files fails.
- ``[ui]`` — the turn browser page (docs/UI.md) mounted in ``aptix serve``:
  ``enabled`` (default false), ``path`` (default ``/ui``) and ``recordings``, the
  folder of recordings it shows (default: ``[recording]``'s directory).
- ``[[mcp_servers]]`` — MCP servers whose tools join the catalog as server tools
  (``config/mcp.py``, docs/MCP.md): started and listed when the file is loaded;
  ``ServiceConfig.close()`` ends them.
- ``[telemetry]`` — ``span_mode``: ``"full"`` (default, a span per step) or
  ``"compact"`` (each step an event on the turn's ``invoke_agent`` span;
  ``engine/telemetry.py``, docs/OBSERVABILITY.md "Compact spans"). Where spans go
  is the ``OTEL_*`` environment's (``adapters/system/tracing.py``).
- ``[retrieval]`` — the SQLite FTS5 retriever (``adapters/retrieval/fts.py``,
  docs/RETRIEVAL.md): ``folder`` (the documents), ``index`` (the index file
  ``aptix index`` builds; default ``retrieval.db``), ``limit`` (passages per turn,
  default 5) and ``collection`` (its name on spans; default the folder's name).
- ``[temporal]`` — durable turns on Temporal (docs/DURABLE.md "Configuration"):
  ``address`` (``host:port``) or ``address_env`` (an environment variable holding
  it), ``namespace``, ``task_queue``, ``blobs`` (a folder for large payloads, shared
  by the workers and the service), ``identity`` (a worker's name), the activities'
  timing (``heartbeat_seconds``, ``model_timeout_seconds``, ``tool_timeout_seconds``,
  ``read_timeout_seconds``, ``commit_attempts``, ``tool_attempts``,
  ``max_retry_wait_seconds``), ``turn_timeout_seconds`` (a whole workflow's bound)
  and ``max_concurrent_turns`` (a worker's). With it ``aptix serve`` starts turns as
  workflows and ``aptix worker`` runs them (``TemporalConfig``).

The catalog brings the executors of the demo tools it offers
(``ConfigCatalog(demo_tools=True)``): the CLI and the HTTP service have no other
server tools to run.

Secrets come only from the environment, and only for the tables a command uses
(``secrets_for``, D364): ``aptix run --llm-script`` reads no model key, ``aptix run``
no API key; a table whose secrets are not read is checked for its shape and left
out of the loaded configuration. Relative paths (the SQLite file, the
script) are resolved against the configuration file's folder. Every mistake is a
``ConfigError`` naming the file, the table and the key (DESIGN.md "Bad input gets
a clear error"); unknown tables and keys are refused.
"""

from __future__ import annotations

import hashlib
import os
import re
import tomllib
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar
from urllib.parse import quote, urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aptix_pipeline.adapters.files import MIN_SIGNING_KEY_BYTES
from aptix_pipeline.adapters.models import ScriptedLLM, ScriptError, TurnScript
from aptix_pipeline.adapters.stores import DEFAULT_STORE_URL, sqlite_target, unknown_store_scheme
from aptix_pipeline.contracts import (
    LLM,
    AptixPipelineError,
    Retriever,
)
from aptix_pipeline.engine import (
    SpanMode,
    ToolRoutingError,
    check_tool_routing,
)
from aptix_pipeline.engine.replay import RecordingOptions
from aptix_pipeline.steps import (
    MAX_IDEMPOTENCY_TTL_SECONDS,
    ErrorDetail,
    PipelineOptions,
    PossiblyExecutedPolicy,
    TranscriptPolicy,
)

from .catalog import CatalogError, ConfigCatalog
from .host import EXTENSION_PATTERN, HostExtension, load_extension
from .spending import EXACT_TABLES, SpendingError, budgets_of, inexact, prices_of

if TYPE_CHECKING:
    from aptix_pipeline.adapters.retrieval import FtsRetriever
    from aptix_pipeline.adapters.tools import McpPool

__all__ = [
    "DEFAULT_STORE_URL",
    "ApiKey",
    "ConfigError",
    "FilesConfig",
    "ModelConfig",
    "OpenAIModelConfig",
    "RetrievalConfig",
    "ScriptedModelConfig",
    "SecretTable",
    "ServerConfig",
    "ServiceConfig",
    "TemporalConfig",
    "UIConfig",
    "build_llm",
    "load_service_config",
    "open_retriever",
    "parse_service_config",
]


_CATALOG_TABLES = ("modes", "server_tools", "agents", "conversations")
_SERVICE_TABLES = (
    "store",
    "model",
    "server",
    "auth",
    "engine",
    "recording",
    "files",
    "ui",
    "retrieval",
    "chat",
    "host",
    "mcp_servers",
    "telemetry",
    "temporal",
    "prices",
    "budgets",
)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

SecretTable = Literal["store", "model", "auth", "files"]
"""A table whose settings may name environment variables holding secrets."""

_ALL_SECRETS: Final[frozenset[SecretTable]] = frozenset({"store", "model", "auth", "files"})


class ConfigError(AptixPipelineError, ValueError):
    """The configuration is wrong; the message names the file, table and key."""


# --- the file's tables, as written ------------------------------------------------------------


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


_T = TypeVar("_T", bound=_Table)


def _env_name() -> Any:
    return Field(default=None, pattern=_ENV_NAME.pattern)


class _Store(_Table):
    url: str | None = Field(default=None, min_length=1)
    url_env: str | None = _env_name()
    password_env: str | None = _env_name()
    synchronous: Literal["normal", "full"] | None = None


class _ScriptedModel(_Table):
    kind: Literal["scripted"]
    script: str = Field(min_length=1)


class _OpenAIModel(_Table):
    kind: Literal["openai"]
    model: str = Field(min_length=1)
    base_url: str | None = Field(default=None, pattern=r"^https?://\S+$")
    api_key_env: str | None = _env_name()
    timeout_seconds: float | None = Field(default=None, gt=0)
    max_attempts: int | None = Field(default=None, ge=1)
    max_total_seconds: float | None = Field(default=None, gt=0)
    max_reply_bytes: int | None = Field(default=None, ge=1)


class _Server(_Table):
    host: str = Field(default="127.0.0.1", min_length=1)
    port: int = Field(default=8080, ge=0, le=65535)
    workers: int = Field(default=1, ge=1)
    max_body_bytes: int = Field(default=1_048_576, ge=1)
    access_log: bool = False
    read_timeout_seconds: float = Field(default=15.0, ge=0, allow_inf_nan=False)
    sse_keepalive_seconds: float = Field(default=15.0, gt=0, allow_inf_nan=False)


class _Key(_Table):
    org: str = Field(min_length=1)
    user: str = Field(min_length=1)
    key_env: str | None = _env_name()
    key_sha256: str | None = Field(default=None, pattern=r"^[0-9a-fA-F]{64}$")


class _Auth(_Table):
    keys: list[_Key] = Field(default_factory=list)


class _Engine(_Table):
    max_server_tool_rounds: int = Field(default=8, ge=0)
    llm_attempts: int = Field(default=3, ge=1)
    retry_wait_seconds: float = Field(default=0.2, ge=0)
    retry_max_wait_seconds: float = Field(default=2.0, ge=0)
    # Limits (docs/CONFIGURATION.md "Limits"); 0 seconds turns a time limit off.
    turn_deadline_seconds: float = Field(default=300.0, ge=0, allow_inf_nan=False)
    server_tool_timeout_seconds: float = Field(default=30.0, ge=0, allow_inf_nan=False)
    max_model_reply_chars: int = Field(default=1_000_000, ge=1)
    max_transcript_messages: int = Field(default=1000, ge=1)
    transcript_policy: TranscriptPolicy = "truncate"
    error_detail: ErrorDetail = "short"
    tool_error_detail: ErrorDetail | None = None  # error_detail's former name, still read
    max_json_depth: int = Field(default=64, ge=1)
    max_errors: int = Field(default=20, ge=1)
    max_input_artifacts: int = Field(default=100, ge=0)
    max_clipboard_images: int = Field(default=20, ge=0)
    max_tool_results: int = Field(default=128, ge=0)
    max_images: int = Field(default=20, ge=0)
    max_image_bytes: int = Field(default=5 * 1024 * 1024, ge=0)
    max_total_image_bytes: int = Field(default=20 * 1024 * 1024, ge=0)
    # Stored answers for retries (engine/idempotency.py); 0 keeps them for good. At most
    # MAX_IDEMPOTENCY_TTL_SECONDS, as PipelineOptions: past year 9999 is no datetime.
    idempotency_ttl_seconds: float = Field(
        default=86_400.0, ge=0, le=MAX_IDEMPOTENCY_TTL_SECONDS, allow_inf_nan=False
    )
    # Server-tool effects (docs/TOOLS.md "Exactly once").
    tool_ledger: bool = True
    tool_ledger_ttl_seconds: float = Field(
        default=604_800.0, ge=0, le=MAX_IDEMPOTENCY_TTL_SECONDS, allow_inf_nan=False
    )
    possibly_executed_policy: PossiblyExecutedPolicy = "fail"
    # Usage, cost and budgets (docs/BUDGETS.md); prices and budgets are tables of their own.
    usage_ledger: bool = True
    max_output_tokens: int | None = Field(default=None, ge=1)
    output_tokens_estimate: int = Field(default=4096, ge=0)
    # Every turn's kept trace (docs/UI.md "Every turn leaves its trace"); 0 keeps them for good.
    keep_traces: bool = True
    trace_ttl_seconds: float = Field(
        default=2_592_000.0, ge=0, le=MAX_IDEMPOTENCY_TTL_SECONDS, allow_inf_nan=False
    )

    def options(self) -> PipelineOptions:
        """The ``PipelineOptions`` these keys give (0 seconds is ``None``: no limit)."""
        values = self.model_dump()
        if values["tool_error_detail"] is None:
            del values["tool_error_detail"]
        elif self.error_detail not in ("short", self.tool_error_detail):
            raise ValueError("[engine].error_detail and tool_error_detail disagree: give one")
        for name in (
            "turn_deadline_seconds",
            "server_tool_timeout_seconds",
            "idempotency_ttl_seconds",
            "tool_ledger_ttl_seconds",
            "trace_ttl_seconds",
        ):
            values[name] = values[name] or None
        return PipelineOptions(**values)


class _Recording(_Table):
    directory: str = Field(min_length=1)
    redact: bool


class _Files(_Table):
    directory: str = Field(min_length=1)
    url_base: str = Field(pattern=r"^https?://[^\s/?#]+(/[^\s?#]*)?$")
    ttl_seconds: int = Field(default=3600, ge=1, le=MAX_IDEMPOTENCY_TTL_SECONDS)
    signing_key_env: str = Field(pattern=_ENV_NAME.pattern)


class _UI(_Table):
    enabled: bool = False
    path: str = Field(default="/ui", pattern=r"^/[A-Za-z0-9._~/-]*[A-Za-z0-9._~-]$")
    recordings: str | None = Field(default=None, min_length=1)


class _Retrieval(_Table):
    folder: str = Field(min_length=1)
    index: str = Field(default="retrieval.db", min_length=1)
    limit: int = Field(default=5, ge=1, le=100)
    collection: str | None = Field(default=None, min_length=1)


class _Host(_Table):
    extension: str | None = Field(default=None, pattern=EXTENSION_PATTERN)


class _Chat(_Table):
    handlers: dict[str, str] = Field(default_factory=dict)


class _Telemetry(_Table):
    span_mode: Literal["full", "compact"] = "full"


_HOST_PORT = re.compile(r"^(?:[^\s/:\[\]]+|\[[0-9A-Fa-f:.]+\]):[0-9]{1,5}$")
_DEFAULT_TASK_QUEUE = "aptix-turns"
"""``adapters/temporal``'s ``DEFAULT_TASK_QUEUE`` (this room does not import that one)."""


class _Temporal(_Table):
    address: str | None = Field(default=None, min_length=1)
    address_env: str | None = _env_name()
    namespace: str = Field(default="default", min_length=1)
    task_queue: str = Field(default=_DEFAULT_TASK_QUEUE, min_length=1)
    blobs: str | None = Field(default=None, min_length=1)
    identity: str | None = Field(default=None, min_length=1)
    heartbeat_seconds: float = Field(default=10.0, gt=0, allow_inf_nan=False)
    model_timeout_seconds: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    tool_timeout_seconds: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    read_timeout_seconds: float = Field(default=30.0, gt=0, allow_inf_nan=False)
    commit_attempts: int = Field(default=5, ge=1)
    tool_attempts: int = Field(default=3, ge=1)
    max_retry_wait_seconds: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    turn_timeout_seconds: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    max_concurrent_turns: int = Field(default=100, ge=1)


# --- the loaded configuration -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ApiKey:
    """One API key of ``[[auth.keys]]``: the caller it stands for and the key's SHA-256."""

    org: str
    user: str
    sha256: bytes = field(repr=False)
    where: str = ""


@dataclass(frozen=True, slots=True)
class ScriptedModelConfig:
    """``[model] kind = "scripted"``: a ``ScriptedLLM`` playing ``script`` (an absolute path)."""

    script: Path


@dataclass(frozen=True, slots=True)
class OpenAIModelConfig:
    """``[model] kind = "openai"``: an OpenAI-compatible endpoint.

    ``None`` leaves a setting to the adapter's default; ``api_key`` is read from
    the environment variable the file names (``None`` when it names none).
    """

    model: str
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    timeout_seconds: float | None = None
    max_attempts: int | None = None
    max_total_seconds: float | None = None
    max_reply_bytes: int | None = None


ModelConfig = ScriptedModelConfig | OpenAIModelConfig
"""What ``[model]`` configures."""


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """``[server]``: where ``aptix serve`` listens, how big a request body may be,
    whether uvicorn logs a line per request (``access_log``, off by default), how
    long a client may take to send one request (``read_timeout_seconds``), and how
    long a streamed answer may stay silent (``sse_keepalive_seconds``)."""

    host: str = "127.0.0.1"
    port: int = 8080
    workers: int = 1
    max_body_bytes: int = 1_048_576
    access_log: bool = False
    read_timeout_seconds: float = 15.0
    """The time a client has to send one whole request, headers and body (0: none)."""
    sse_keepalive_seconds: float = 15.0
    """The longest a streamed answer (``text/event-stream``) goes without sending
    anything: after that long a ``: keep-alive`` comment is sent (docs/HTTP.md)."""


@dataclass(frozen=True, slots=True)
class FilesConfig:
    """``[files]``: where a ``LocalFileStore`` keeps files (an absolute path), the base of
    their URLs, how long a URL works, and the key that signs it (from the environment)."""

    directory: Path
    url_base: str
    ttl_seconds: int = 3600
    signing_key: bytes = field(default=b"", repr=False)


@dataclass(frozen=True, slots=True)
class UIConfig:
    """``[ui]``: whether ``aptix serve`` mounts the turn browser page, at which path, and
    the folder of recordings it shows (an absolute path, or ``None``: none)."""

    enabled: bool = False
    path: str = "/ui"
    recordings: Path | None = None


@dataclass(frozen=True, slots=True)
class TemporalConfig:
    """``[temporal]``: where durable turns run (docs/DURABLE.md "Configuration").

    ``address`` is the Temporal frontend's ``host:port``; ``namespace`` and
    ``task_queue`` say where the turns go; ``blobs`` is the folder large payloads
    wait in (``DirectoryBlobs``; ``None``: none, a payload over Temporal's 2 MB cap
    fails the turn's start); ``identity`` names a worker (default
    ``aptix@<host>:<pid>``). ``heartbeat_seconds`` … ``max_retry_wait_seconds`` are
    the workers' ``DurableSettings``; ``turn_timeout_seconds`` bounds a whole
    workflow (``None``: the turn's own deadline only); ``max_concurrent_turns`` is how
    many turns a worker runs at once (``aptix worker --concurrency``).
    """

    address: str
    namespace: str = "default"
    task_queue: str = _DEFAULT_TASK_QUEUE
    blobs: Path | None = None
    identity: str | None = None
    heartbeat_seconds: float = 10.0
    model_timeout_seconds: float | None = None
    tool_timeout_seconds: float | None = None
    read_timeout_seconds: float = 30.0
    commit_attempts: int = 5
    tool_attempts: int = 3
    max_retry_wait_seconds: float | None = None
    turn_timeout_seconds: float | None = None
    max_concurrent_turns: int = 100


@dataclass(frozen=True, slots=True)
class RetrievalConfig:
    """``[retrieval]``: the documents ``folder``, the ``index`` file ``aptix index`` builds
    from it (both absolute), the ``collection`` name and the passages per turn (``limit``,
    also ``ServiceConfig.options.retrieval_limit``)."""

    folder: Path
    index: Path
    collection: str
    limit: int = 5

    def retriever(self) -> FtsRetriever:
        """The retriever on the index; ``RetrievalIndexError`` when it was not built."""
        from aptix_pipeline.adapters.retrieval import FtsRetriever

        return FtsRetriever(self.index, collection=self.collection)


@dataclass(frozen=True, slots=True)
class ServiceConfig:
    """One loaded configuration file; see the module docstring.

    ``store_url`` is ``None`` when the file has no ``[store]`` (callers use the data
    folder's file, ``data_dir.default_store_url``) and holds the password when
    ``password_env`` gave one, so it is kept out of ``repr``. ``model`` is ``None``
    when the file has no ``[model]``. A table left out of ``secrets_for`` is ``None``
    (``()`` for ``api_keys``) as well.
    """

    source: str
    catalog: ConfigCatalog = field(repr=False)
    store_url: str | None = field(default=None, repr=False)
    model: ModelConfig | None = None
    server: ServerConfig = field(default_factory=ServerConfig)
    api_keys: tuple[ApiKey, ...] = ()
    options: PipelineOptions = field(default_factory=PipelineOptions)
    recording: RecordingOptions | None = None
    files: FilesConfig | None = None
    ui: UIConfig = field(default_factory=UIConfig)
    retrieval: RetrievalConfig | None = None
    chat_handlers: Mapping[str, str] = field(default_factory=dict)
    host: HostExtension = field(default_factory=HostExtension)
    """``[host] extension``'s ``HostExtension``: the host's rules, hooks, listeners and
    server tools (``config/host.py``); an empty one without the key."""
    """``[chat.handlers]``: client tool name → the command ``aptix chat`` runs for its
    calls (``cli/chat.py``, D371)."""
    span_mode: SpanMode = SpanMode.FULL
    """``[telemetry] span_mode``: the pipeline's ``Telemetry(span_mode=...)``."""

    temporal: TemporalConfig | None = None
    """``[temporal]``: turns run durably on Temporal (``None``: in process)."""

    mcp: McpPool | None = field(default=None, repr=False)
    """``[[mcp_servers]]``'s started pool (``config/mcp.py``): their tools are in
    ``catalog``; ``close()`` ends it."""

    def close(self) -> None:
        """Close what loading started: the MCP servers' connections (idempotent)."""
        if self.mcp is not None:
            self.mcp.close()


def _where(table: str, loc: tuple[int | str, ...]) -> str:
    path = f"[{table}]"
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def _table(model: type[_T], data: object, table: str, source: str) -> _T:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: [{table}] must be a table")
    try:
        return model.model_validate(data)
    except ValidationError as error:
        first = error.errors()[0]
        raise ConfigError(f"{source}: {_where(table, first['loc'])}: {first['msg']}") from None


def _env(name: str, where: str, env: Mapping[str, str]) -> str:
    value = env.get(name)
    if value is None or not value.strip():
        raise ConfigError(f"{where}: environment variable {name} is not set (or is empty)")
    return value


def _store_url(data: object, base: Path, source: str, env: Mapping[str, str]) -> str:
    table = _table(_Store, data, "store", source)
    if (table.url is None) == (table.url_env is None):
        raise ConfigError(f"{source}: [store]: give exactly one of url and url_env")
    if table.url is not None:
        url = table.url
    else:
        assert table.url_env is not None
        url = _env(table.url_env, f"{source}: [store].url_env", env).strip()
    if table.synchronous is not None and not url.startswith("sqlite:"):
        raise ConfigError(f"{source}: [store].synchronous applies to sqlite: stores only")
    if url.startswith(("postgresql://", "postgres://")):
        if table.password_env is None:
            return url
        return _with_password(url, table.password_env, source, env)
    if table.password_env is not None:
        raise ConfigError(f"{source}: [store].password_env applies to postgresql:// URLs only")
    if url == "memory":
        return url
    if url.startswith("sqlite:"):
        try:
            path, synchronous = sqlite_target(url)
        except ValueError as error:
            raise ConfigError(f"{source}: [store].url: {error}") from None
        if table.synchronous is not None:
            if "?" in url:
                raise ConfigError(
                    f"{source}: [store]: synchronous is given both in url and as "
                    "[store].synchronous; keep one"
                )
            synchronous = table.synchronous
        options = "" if synchronous == "normal" else f"?synchronous={synchronous}"
        return f"sqlite:{base / Path(path).expanduser()}{options}"
    if url.endswith((".db", ".sqlite", ".sqlite3")) and unknown_store_scheme(url) is None:
        return f"sqlite:{base / Path(url).expanduser()}"
    raise ConfigError(
        f"{source}: [store].url: unknown store {url.split(':', 1)[0]!r}: "
        "use memory, sqlite:PATH or postgresql://USER@HOST/DB"
    )


def _with_password(url: str, variable: str, source: str, env: Mapping[str, str]) -> str:
    parts = urlsplit(url)
    if parts.password is not None:
        raise ConfigError(
            f"{source}: [store]: the URL already holds a password; keep it only in password_env"
        )
    password = _env(variable, f"{source}: [store].password_env", env)
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    netloc = f"{user}:{quote(password, safe='')}@{host}"
    return urlunsplit(parts._replace(netloc=netloc))


def _model(data: object, base: Path, source: str, env: Mapping[str, str]) -> ModelConfig:
    kind = data.get("kind") if isinstance(data, dict) else None
    if kind == "scripted":
        scripted = _table(_ScriptedModel, data, "model", source)
        script = (base / Path(scripted.script).expanduser()).resolve()
        try:
            ScriptedLLM.from_file(script)
        except (OSError, ScriptError) as error:
            raise ConfigError(f"{source}: [model].script: {script}: {error}") from None
        return ScriptedModelConfig(script=script)
    if kind == "openai":
        table = _table(_OpenAIModel, data, "model", source)
        api_key = (
            _env(table.api_key_env, f"{source}: [model].api_key_env", env)
            if table.api_key_env is not None
            else None
        )
        return OpenAIModelConfig(
            model=table.model,
            base_url=table.base_url,
            api_key=api_key,
            timeout_seconds=table.timeout_seconds,
            max_attempts=table.max_attempts,
            max_total_seconds=table.max_total_seconds,
            max_reply_bytes=table.max_reply_bytes,
        )
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: [model] must be a table")
    raise ConfigError(f"{source}: [model].kind must be 'scripted' or 'openai', not {kind!r}")


def _model_shape(data: object, base: Path, source: str) -> None:
    """``[model]`` checked as written, its secret not read (the caller uses no model)."""
    kind = data.get("kind") if isinstance(data, dict) else None
    if kind == "openai":
        _table(_OpenAIModel, data, "model", source)
    else:
        _model(data, base, source, {})


def _keys_shape(data: object, source: str) -> tuple[ApiKey, ...]:
    """``[auth]`` checked as written, no key read (the caller authenticates no one)."""
    table = _table(_Auth, data, "auth", source)
    for index, key in enumerate(table.keys):
        if (key.key_env is None) == (key.key_sha256 is None):
            raise ConfigError(
                f"{source}: [auth].keys[{index}]: give exactly one of key_env and key_sha256"
            )
    return ()


def _api_keys(data: object, source: str, env: Mapping[str, str]) -> tuple[ApiKey, ...]:
    table = _table(_Auth, data, "auth", source)
    keys: list[ApiKey] = []
    seen: dict[bytes, str] = {}
    for index, key in enumerate(table.keys):
        where = f"{source}: [auth].keys[{index}]"
        if (key.key_env is None) == (key.key_sha256 is None):
            raise ConfigError(f"{where}: give exactly one of key_env and key_sha256")
        if key.key_env is not None:
            digest = hashlib.sha256(_env(key.key_env, f"{where}.key_env", env).encode()).digest()
        else:
            assert key.key_sha256 is not None
            digest = bytes.fromhex(key.key_sha256)
        if digest in seen:
            raise ConfigError(f"{where}: the same key as {seen[digest]}")
        seen[digest] = f"[auth].keys[{index}]"
        keys.append(ApiKey(org=key.org, user=key.user, sha256=digest, where=seen[digest]))
    return tuple(keys)


def _files(data: object, base: Path, source: str, env: Mapping[str, str]) -> FilesConfig:
    table = _table(_Files, data, "files", source)
    key = _env(table.signing_key_env, f"{source}: [files].signing_key_env", env).encode("utf-8")
    if len(key) < MIN_SIGNING_KEY_BYTES:
        raise ConfigError(
            f"{source}: [files].signing_key_env: ${table.signing_key_env} holds "
            f"{len(key)} bytes; a signing key needs {MIN_SIGNING_KEY_BYTES} or more"
        )
    return FilesConfig(
        directory=base / table.directory,
        url_base=table.url_base,
        ttl_seconds=table.ttl_seconds,
        signing_key=key,
    )


def _temporal(data: object, base: Path, source: str, env: Mapping[str, str]) -> TemporalConfig:
    """``[temporal]``: its address from the file or the environment, ``blobs`` resolved."""
    table = _table(_Temporal, data, "temporal", source)
    if (table.address is None) == (table.address_env is None):
        raise ConfigError(f"{source}: [temporal]: give exactly one of address and address_env")
    address, where = table.address, f"{source}: [temporal].address"
    if table.address_env is not None:
        where = f"{source}: [temporal].address_env: ${table.address_env}"
        address = _env(table.address_env, f"{source}: [temporal].address_env", env).strip()
    assert address is not None
    if _HOST_PORT.match(address) is None:
        raise ConfigError(f"{where}: {address!r} is not host:port (such as 127.0.0.1:7233)")
    values = table.model_dump(exclude={"address", "address_env", "blobs"})
    blobs = None if table.blobs is None else base / Path(table.blobs).expanduser()
    return TemporalConfig(address=address, blobs=blobs, **values)


def _builtin_catalog_data() -> dict[str, Any]:
    """The built-in catalog's tables without its agents' placeholder ``model = "scripted"``.

    An agent's model name wins over ``[model].model`` (the LLM request carries it),
    so the placeholder would send ``"scripted"`` to a real endpoint (D83).
    """
    text = resources.files(__package__).joinpath("default_config.toml").read_text("utf-8")
    data = tomllib.loads(text)
    for agent in data.get("agents", []):
        agent.pop("model", None)
    return data


def _builtin_catalog() -> ConfigCatalog:
    """The built-in catalog without its agents' placeholder model (``_builtin_catalog_data``)."""
    return ConfigCatalog(_builtin_catalog_data(), source="default_config.toml", demo_tools=True)


def parse_service_config(
    data: Mapping[str, Any],
    *,
    source: str = "configuration",
    base_dir: str | Path = ".",
    env: Mapping[str, str] | None = None,
    secrets_for: Collection[SecretTable] = _ALL_SECRETS,
) -> ServiceConfig:
    """A configuration from parsed TOML; ``base_dir`` anchors relative paths.

    ``secrets_for`` names the tables the caller uses: only theirs are read from the
    environment. Any other of ``[store]``, ``[model]``, ``[auth]`` and ``[files]`` is
    checked for its shape and left out (``store_url``, ``model`` and ``files`` ``None``,
    ``api_keys`` empty).
    """
    environment = os.environ if env is None else env
    base = Path(base_dir).resolve()
    unknown = sorted(set(data) - {*_CATALOG_TABLES, *_SERVICE_TABLES})
    if unknown:
        raise ConfigError(
            f"{source}: unknown table(s) {unknown}; "
            f"known: {', '.join([*_CATALOG_TABLES, *_SERVICE_TABLES])}"
        )
    catalog_tables = {key: data[key] for key in _CATALOG_TABLES if key in data}
    host = HostExtension()
    spec = _table(_Host, data.get("host", {}), "host", source).extension
    if spec is not None:
        try:
            host = load_extension(spec, base)
        except (ValueError, TypeError) as error:
            raise ConfigError(f"{source}: {error}") from None
    mcp = None
    if "mcp_servers" in data:  # started here: their tools join the catalog (config/mcp.py)
        from .mcp import McpConfigError, mcp_servers, start_pool, with_mcp_tools

        try:
            servers = mcp_servers(data["mcp_servers"], base, source, environment)
            mcp = start_pool(servers, source)
            catalog_tables = with_mcp_tools(
                catalog_tables or _builtin_catalog_data(), mcp, source, tuple(host.tools)
            )
        except McpConfigError as error:
            if mcp is not None:
                mcp.close()
            raise ConfigError(str(error)) from None
    try:
        return _with_catalog(
            data, source, base, environment, secrets_for, catalog_tables, host, mcp
        )
    except BaseException:
        if mcp is not None:
            mcp.close()
        raise


def _with_catalog(
    data: Mapping[str, Any],
    source: str,
    base: Path,
    environment: Mapping[str, str],
    secrets_for: Collection[SecretTable],
    catalog_tables: Mapping[str, Any],
    host: HostExtension,
    mcp: McpPool | None,
) -> ServiceConfig:
    """``parse_service_config`` once the catalog's tables and the host are known."""
    try:
        catalog = (
            ConfigCatalog(dict(catalog_tables), source=source, demo_tools=True)
            if catalog_tables
            else _builtin_catalog()
        )
    except CatalogError as error:
        raise ConfigError(str(error)) from None
    executors = {**catalog.tools, **(mcp.executors() if mcp is not None else {}), **host.tools}
    try:  # a server tool the file declares has no executor here: say so before serving
        check_tool_routing(catalog.all_modes(), catalog.all_agents(), executors)
    except ToolRoutingError as error:
        raise ConfigError(f"{source}: {error}") from None
    engine = _table(_Engine, data.get("engine", {}), "engine", source)
    server = _table(_Server, data.get("server", {}), "server", source)
    recording = None
    if "recording" in data:
        table = _table(_Recording, data["recording"], "recording", source)
        recording = RecordingOptions(directory=base / table.directory, redact=table.redact)
    ui = _ui(data.get("ui", {}), base, source, recording)
    retrieval = None
    try:
        options = engine.options()
    except ValueError as error:
        raise ConfigError(f"{source}: {error}") from None
    try:  # [prices] and [[budgets]] (config/spending.py)
        if "prices" in data:
            options = replace(options, prices=prices_of(data["prices"]))
        if "budgets" in data:
            options = replace(options, budgets=budgets_of(data["budgets"]))
    except SpendingError as error:
        raise ConfigError(f"{source}: {error}") from None
    if "retrieval" in data:
        found = _table(_Retrieval, data["retrieval"], "retrieval", source)
        folder = base / Path(found.folder).expanduser()
        retrieval = RetrievalConfig(
            folder=folder,
            index=base / Path(found.index).expanduser(),
            collection=found.collection or folder.name,
            limit=found.limit,
        )
        options = replace(options, retrieval_limit=found.limit)
    used = frozenset(secrets_for)
    unknown_uses = sorted(used - _ALL_SECRETS)
    if unknown_uses:
        known = ", ".join(sorted(_ALL_SECRETS))
        raise ValueError(f"secrets_for: unknown table(s) {unknown_uses}; known: {known}")
    store_url = model = None
    if "store" in data:
        if "store" in used:
            store_url = _store_url(data["store"], base, source, environment)
        else:
            _table(_Store, data["store"], "store", source)
    if "model" in data:
        if "model" in used:
            model = _model(data["model"], base, source, environment)
        else:
            _model_shape(data["model"], base, source)
    auth = data.get("auth", {})
    chat = _table(_Chat, data.get("chat", {}), "chat", source)
    telemetry = _table(_Telemetry, data.get("telemetry", {}), "telemetry", source)
    for name, command in chat.handlers.items():
        if not command.strip():
            raise ConfigError(f"{source}: [chat.handlers].{name}: give the command to run")
    temporal = (
        _temporal(data["temporal"], base, source, environment) if "temporal" in data else None
    )
    files = None
    if "files" in data:
        if "files" in used:
            files = _files(data["files"], base, source, environment)
        else:
            _table(_Files, data["files"], "files", source)
    return ServiceConfig(
        source=source,
        catalog=catalog,
        store_url=store_url,
        model=model,
        server=ServerConfig(**server.model_dump()),
        api_keys=(
            _api_keys(auth, source, environment) if "auth" in used else _keys_shape(auth, source)
        ),
        options=options,
        recording=recording,
        files=files,
        ui=ui,
        retrieval=retrieval,
        chat_handlers=dict(chat.handlers),
        host=host,
        mcp=mcp,
        span_mode=SpanMode(telemetry.span_mode),
        temporal=temporal,
    )


def _ui(data: object, base: Path, source: str, recording: RecordingOptions | None) -> UIConfig:
    """``[ui]``, its recordings folder resolved (default: the ``[recording]`` directory)."""
    table = _table(_UI, data, "ui", source)
    folder = base / table.recordings if table.recordings is not None else None
    if folder is None and recording is not None and recording.directory is not None:
        folder = Path(recording.directory)
    return UIConfig(enabled=table.enabled, path=table.path, recordings=folder)


def load_service_config(
    path: str | Path,
    *,
    env: Mapping[str, str] | None = None,
    secrets_for: Collection[SecretTable] = _ALL_SECRETS,
) -> ServiceConfig:
    """Load a configuration file; ``env`` (default ``os.environ``) supplies the secrets of
    the tables ``secrets_for`` names (``parse_service_config``)."""
    file = Path(path)
    try:
        # Floats read exactly, then as floats but in [prices] and [[budgets]] (config/spending.py)
        exact = tomllib.loads(file.read_text(encoding="utf-8"), parse_float=Decimal)
        data = {k: v if k in EXACT_TABLES else inexact(v) for k, v in exact.items()}
    except OSError as error:
        raise ConfigError(f"{file}: cannot read: {error.strerror or error}") from None
    except UnicodeDecodeError as error:
        raise ConfigError(f"{file}: not UTF-8 text: {error}") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{file}: not valid TOML: {error}") from None
    return parse_service_config(
        data, source=str(file), base_dir=file.parent, env=env, secrets_for=secrets_for
    )


def build_llm(model: ModelConfig) -> LLM:
    """The model port ``[model]`` describes.

    The OpenAI-compatible adapter is imported here, so the rest works without the
    ``openai`` extra; without it an ``openai`` model is a ``ConfigError`` naming the extra.
    """
    if isinstance(model, ScriptedModelConfig):
        text = model.script.read_bytes()
        if ScriptedLLM.has_turns(text):  # every session plays it from its own turn (D393)
            return TurnScript(text)
        return ScriptedLLM.from_json(text)
    try:
        from aptix_pipeline.adapters.models import OpenAICompatibleLLM  # the `openai` extra
    except ImportError as error:
        raise ConfigError(
            f"[model] kind = 'openai' needs the openai extra ({error}): "
            "pip install 'aptix-pipeline[openai]'"
        ) from None

    settings: dict[str, Any] = {
        "timeout_seconds": model.timeout_seconds,
        "max_attempts": model.max_attempts,
        "max_total_seconds": model.max_total_seconds,
        "max_reply_bytes": model.max_reply_bytes,
    }
    return OpenAICompatibleLLM(
        model=model.model,
        base_url=model.base_url,
        api_key=model.api_key,
        **{key: value for key, value in settings.items() if value is not None},
    )


def open_retriever(config: ServiceConfig) -> Retriever | None:
    """The retriever ``[retrieval]`` configures (``None`` without the table); a
    ``ConfigError`` naming the index when it cannot be opened."""
    if config.retrieval is None:
        return None
    from aptix_pipeline.adapters.retrieval import RetrievalIndexError

    try:
        return config.retrieval.retriever()
    except RetrievalIndexError as error:
        raise ConfigError(
            f"{config.source}: [retrieval].index: {error} (aptix index --config {config.source})"
        ) from None
