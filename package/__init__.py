"""aptix-pipeline: one Aptix agent turn as an explicit, formal state machine.

The import namespace is assembled from the repository's top-level folders
(DESIGN.md "Layout and layers"): ``aptix_pipeline.contracts`` (wire models and the
pipeline context), ``aptix_pipeline.validators`` (the AGN-036, AGN-034, AGN-033 and
container-design rules), ``aptix_pipeline.steps``, ``aptix_pipeline.engine`` and
``aptix_pipeline.adapters``.

The names most hosts need are re-exported here and imported on first use, so
``import aptix_pipeline`` stays cheap.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from .contracts import (
        AgentExecuteRequest,
        AgentExecuteResponse,
        AptixPipelineError,
        Caller,
        ContextType,
        InvokeError,
        InvokeResult,
        InvokeWarning,
        PipelineContext,
        PipelineStep,
    )
    from .engine import Pipeline, PipelineOptions, Ports, TurnReport
    from .validators import (
        parse_request,
        validate_core,
        validate_post_step,
        validate_pre_step,
        validate_request,
        validate_response,
        validate_tool_call_manifest,
    )

_EXPORTS = {
    "AgentExecuteRequest": "contracts",
    "AgentExecuteResponse": "contracts",
    "AptixPipelineError": "contracts",
    "Caller": "contracts",
    "ContextType": "contracts",
    "InvokeError": "contracts",
    "InvokeResult": "contracts",
    "InvokeWarning": "contracts",
    "PipelineContext": "contracts",
    "Pipeline": "engine",
    "PipelineOptions": "engine",
    "Ports": "engine",
    "TurnReport": "engine",
    "PipelineStep": "contracts",
    "parse_request": "validators",
    "validate_core": "validators",
    "validate_post_step": "validators",
    "validate_pre_step": "validators",
    "validate_request": "validators",
    "validate_response": "validators",
    "validate_tool_call_manifest": "validators",
}

__all__ = [
    "AgentExecuteRequest",
    "AgentExecuteResponse",
    "AptixPipelineError",
    "Caller",
    "ContextType",
    "InvokeError",
    "InvokeResult",
    "InvokeWarning",
    "Pipeline",
    "PipelineContext",
    "PipelineOptions",
    "PipelineStep",
    "Ports",
    "TurnReport",
    "__version__",
    "parse_request",
    "validate_core",
    "validate_post_step",
    "validate_pre_step",
    "validate_request",
    "validate_response",
    "validate_tool_call_manifest",
]


def __getattr__(name: str) -> Any:
    subpackage = _EXPORTS.get(name)
    if subpackage is None:
        raise AttributeError(f"module 'aptix_pipeline' has no attribute {name!r}")
    value = getattr(import_module(f".{subpackage}", __name__), name)
    globals()[name] = value
    return value
