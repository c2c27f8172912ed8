"""A candidate of an eval: a configuration file's model, prompts and tools, run live.

``Candidate.load(path)`` reads a service configuration (docs/CONFIGURATION.md) for
what an eval runs live: its ``[model]``, its catalog (modes, agents and their
prompts, server tools), its ``[retrieval]`` index and its ``[host]`` extension's
hooks, rules and tools; and its ``[prices]``, which price the candidate's calls and
the recorded ones alike. No store and no API keys but the model's are read (as
``aptix replay --live``). Each case gets a model of its own (``Candidate.live``):
a scripted model plays from its start for every case, and concurrent cases never
share a model's state (docs/CONFORMANCE.md D623).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from aptix_pipeline.adapters.config import (
    ConfigError,
    SecretTable,
    ServiceConfig,
    build_llm,
    load_service_config,
    open_retriever,
)
from aptix_pipeline.contracts import LLM, PriceTable, Retriever
from aptix_pipeline.engine.replay import LivePorts

__all__ = ["Candidate"]


@dataclass(frozen=True, slots=True)
class Candidate:
    """What an eval runs live, named (the configuration's file name by default).

    ``model`` makes the candidate's model for one case; ``prices`` prices its calls
    (``None``: unpriced, tokens alone).
    """

    name: str
    model: Callable[[], LLM]
    config: ServiceConfig
    prices: PriceTable | None = None
    retriever: Retriever | None = field(default=None, repr=False)

    @classmethod
    def load(cls, path: str | Path, *, name: str | None = None) -> Candidate:
        """The candidate a configuration file describes; ``ConfigError`` naming the file
        when it does not load or has no ``[model]``."""
        only_model: tuple[SecretTable, ...] = ("model",)  # no store, no API keys (D623)
        config = load_service_config(path, secrets_for=only_model)
        model_config = config.model
        if model_config is None:
            config.close()
            raise ConfigError(f"{path}: a candidate needs a [model] table")
        build_llm(model_config)  # a script or an extra that is missing is named now
        return cls(
            name=name or Path(path).name,
            model=lambda: build_llm(model_config),
            config=config,
            prices=config.options.prices,
            retriever=open_retriever(config),
        )

    def live(self) -> LivePorts:
        """The ports one case runs live: a fresh model, the catalog, the server tools,
        the retriever, the host's hooks and rules."""
        catalog, host = self.config.catalog, self.config.host
        return LivePorts(
            llm=self.model(),
            tools={**catalog.tools, **host.tools},
            modes=catalog,
            agents=catalog,
            retriever=self.retriever,
            hooks=host.hooks,
            rules=tuple(host.rules),
        )

    def close(self) -> None:
        """Close what loading started (MCP servers)."""
        self.config.close()
