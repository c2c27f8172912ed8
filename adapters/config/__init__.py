"""Configuration: the service's TOML file (``ServiceConfig``), the mode and agent
catalog it holds (``ConfigCatalog``, with the built-in ``default_config.toml``), and
the data folder where sessions live by default.

May import the port rooms (stores, models, retrieval, files, tools, system); never
the front doors (cli, http, ui).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aptix_pipeline.lazy import lazy_exports

if TYPE_CHECKING:
    from .catalog import CatalogError, ConfigCatalog
    from .data_dir import default_store_path, default_store_url
    from .host import HostExtension, load_extension
    from .mcp import McpConfigError, mcp_servers, start_pool, with_mcp_tools
    from .service import (
        ApiKey,
        ConfigError,
        FilesConfig,
        OpenAIModelConfig,
        ScriptedModelConfig,
        SecretTable,
        ServiceConfig,
        TemporalConfig,
        UIConfig,
        build_llm,
        load_service_config,
        open_retriever,
    )

_EXPORTS: dict[str, str] = {
    "CatalogError": "catalog",
    "ConfigCatalog": "catalog",
    "default_store_path": "data_dir",
    "default_store_url": "data_dir",
    "HostExtension": "host",
    "load_extension": "host",
    "McpConfigError": "mcp",
    "mcp_servers": "mcp",
    "start_pool": "mcp",
    "with_mcp_tools": "mcp",
    "ApiKey": "service",
    "build_llm": "service",
    "ConfigError": "service",
    "FilesConfig": "service",
    "load_service_config": "service",
    "open_retriever": "service",
    "OpenAIModelConfig": "service",
    "ScriptedModelConfig": "service",
    "SecretTable": "service",
    "ServiceConfig": "service",
    "TemporalConfig": "service",
    "UIConfig": "service",
}
"""Each name other rooms use, and the module it comes from (imported on first use)."""

__all__ = [
    "ApiKey",
    "CatalogError",
    "ConfigCatalog",
    "ConfigError",
    "FilesConfig",
    "HostExtension",
    "McpConfigError",
    "OpenAIModelConfig",
    "ScriptedModelConfig",
    "SecretTable",
    "ServiceConfig",
    "TemporalConfig",
    "UIConfig",
    "build_llm",
    "default_store_path",
    "default_store_url",
    "load_extension",
    "load_service_config",
    "mcp_servers",
    "open_retriever",
    "start_pool",
    "with_mcp_tools",
]

# Hidden from type checkers, which see the imports above: a misspelt name is an error.
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
