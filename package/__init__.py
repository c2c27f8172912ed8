"""aptix-pipeline: one Aptix agent turn as an explicit, formal state machine.

A host imports everything it needs from here::

    from aptix_pipeline import Caller, ScriptedLLM, embedded_pipeline

    pipeline = embedded_pipeline(llm=ScriptedLLM([{"text": "Hello."}]), store="memory")
    result = pipeline.execute_sync({"Instruction": "Say hello."}, Caller(org="acme", user="ada"))

The names are grouped below as the README and docs/ present them: running a turn,
the request and response models (AGN-034, AGN-033), the ports a host plugs in and
the values they carry, the rules, the events, recording and replay, diagrams, and
the adapters of the embedded defaults. They are imported on first use, so
``import aptix_pipeline`` stays cheap and an adapter's optional dependency (psycopg,
openai, FastAPI) is needed only by a host that uses it.

The subpackages (DESIGN.md "Layout and layers") are the implementation:
``contracts`` ← ``validators`` ← ``steps`` ← ``engine`` ← ``adapters``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .lazy import lazy_exports

__version__ = "0.1.0"

if TYPE_CHECKING:
    from .adapters import (
        BUILTIN_TOOLS,
        BlobStore,
        BufferedTransaction,
        Candidate,
        CaptureError,
        ConfigCatalog,
        DirectoryBlobs,
        DurablePipeline,
        DurableProgress,
        DurableSettings,
        DurableStream,
        DurableWorker,
        EvalReport,
        FtsRetriever,
        HostExtension,
        HttpServer,
        LocalFileStore,
        McpPool,
        MemoryStore,
        OpenAICompatibleLLM,
        PostgresStore,
        RandomIds,
        RecordedStore,
        ScriptedLLM,
        SequentialIds,
        ServiceConfig,
        SessionWrite,
        SQLiteStore,
        StdioServer,
        SteppingClock,
        StoreBackend,
        StreamBrokenError,
        SystemClock,
        TemporalConfig,
        TurnScript,
        TurnWrite,
        TurnWrites,
        build_index,
        capture_cases,
        create_app,
        durable_pipeline,
        durable_worker,
        embedded_pipeline,
        load_cases,
        open_store,
        outcome_replaceable,
        report_html,
        report_json,
        report_junit,
        report_table,
        run_evals,
    )
    from .contracts import (
        DEFAULT_MODE,
        LLM,
        AgentCatalog,
        AgentContext,
        AgentExecuteRequest,
        AgentExecuteResponse,
        AptixPipelineError,
        ArtifactEncoding,
        ArtifactOrigin,
        Budget,
        BudgetCheck,
        BudgetMetric,
        BudgetRefusal,
        BudgetScope,
        BudgetWindow,
        Caller,
        Charge,
        ChatMessage,
        ChatRole,
        ClipboardImage,
        Clock,
        ContentPart,
        ContextType,
        ConversationContext,
        Envelope,
        ErrorCode,
        FileRef,
        FileStore,
        ForkPoint,
        ForkRefusal,
        ForkRefusedError,
        HostErrorCode,
        Idempotence,
        IdSource,
        ImagePart,
        InputArtifact,
        InvokeError,
        InvokeResult,
        InvokeWarning,
        LedgerEntry,
        LLMReply,
        LLMRequest,
        MalformedStreamError,
        ModeCatalog,
        ModeHistoryEntry,
        ModeSpec,
        Passage,
        PassageSource,
        PermanentPortError,
        PipelineContext,
        PipelineStep,
        Price,
        PriceTable,
        RagOperator,
        RagScopeCondition,
        ReplyAssembler,
        ReplyChunk,
        ReplyFinished,
        ReplyTextDelta,
        ReplyToolCallDelta,
        ReserveOutcome,
        ResponseKind,
        ResponsePayload,
        ResponseType,
        RetrievalQuery,
        Retriever,
        Session,
        SessionForks,
        SessionStore,
        SessionTransaction,
        SourceType,
        StoreConflictError,
        StoredFile,
        StoredOutcome,
        StreamingLLM,
        TextPart,
        ToolCall,
        ToolDefinition,
        ToolExecutor,
        ToolFile,
        ToolInvocation,
        ToolLedger,
        ToolOutput,
        ToolPause,
        ToolResult,
        Transcript,
        Turn,
        TurnStatus,
        UnpricedPolicy,
        Usage,
        UsageCall,
        UsageLedger,
        UsageQuery,
        WorkspaceHints,
        split_reply,
    )
    from .engine import (
        PROGRESS_EVENTS,
        BudgetStanding,
        CallUsage,
        CheckRan,
        CheckRecord,
        DiagramError,
        DiagramFormat,
        FaultRecord,
        GraphvizMissingError,
        Listener,
        LLMCallRecord,
        ModeChanged,
        ModelCallFinished,
        ModelCallRetried,
        ModelCallStarted,
        ModelFirstChunk,
        ModelTextDelta,
        Pipeline,
        Proceed,
        RequestInput,
        RetrievalFinished,
        RetrievalRecord,
        RetrievalStarted,
        Runtime,
        SpanMode,
        StateTrace,
        StepEnded,
        StepStarted,
        StreamDelta,
        StreamItem,
        StreamProgress,
        StreamResult,
        Telemetry,
        ToolCallHandled,
        ToolExecuted,
        ToolExecutionStarted,
        ToolRoutingError,
        TransitionRecord,
        TransitionTaken,
        TurnCall,
        TurnEvent,
        TurnFaulted,
        TurnFinished,
        TurnIdentified,
        TurnInterceptor,
        TurnReport,
        TurnStarted,
        TurnStream,
        UsageGroup,
        UsageGroupBy,
        UsageReport,
        UsageTotals,
        WarningRaised,
        diagram_text,
        pipeline_diagram,
        progress_json,
        usage_report,
    )
    from .engine.replay import (
        RECORDING_FORMAT,
        Divergence,
        Evaluation,
        Expectations,
        LivePorts,
        PortCall,
        RecordedError,
        Recorder,
        RecordingOptions,
        ReplayDivergenceError,
        ReplayOutcome,
        TurnFacts,
        TurnRecording,
        assert_replays,
        evaluate,
        recordings_in,
        replay,
        replay_sync,
        write_recording,
    )
    from .steps import (
        STEP_FUNCTIONS,
        ErrorDetail,
        Hooks,
        LedgeredTool,
        ModeChange,
        PipelineOptions,
        Ports,
        PossiblyExecutedPolicy,
        RejectionKind,
        StepFaultError,
        StepFunction,
        ToolCallFate,
        ToolCallRecord,
        ToolCallSide,
        ToolErrorDetail,
        ToolExecution,
        ToolPossiblyExecutedError,
        TurnScope,
        estimate_prompt_tokens,
        run_ledgered,
        tool_call_key,
    )
    from .testing import StoreContract
    from .validators import (
        HostRule,
        HostRules,
        Rule,
        all_rules,
        parse_request,
        parse_response,
        validate_core,
        validate_post_step,
        validate_pre_step,
        validate_request,
        validate_response,
        validate_tool_call_manifest,
    )

_GROUPS: dict[str, dict[str, str]] = {
    "Running a turn (docs/EMBEDDING.md)": {
        "engine": "Pipeline TurnReport RequestInput Runtime Telemetry SpanMode",
        "steps": "PipelineOptions Ports",
    },
    "Streaming (docs/STREAMING.md)": {
        "engine": (
            "TurnStream StreamItem StreamProgress StreamDelta StreamResult "
            "PROGRESS_EVENTS progress_json"
        ),
    },
    "Interceptors and step overrides (docs/EXTENDING.md)": {
        "engine": "TurnInterceptor TurnCall Proceed",
        "steps": "STEP_FUNCTIONS StepFunction TurnScope StepFaultError",
    },
    "Hooks and host rules (docs/EXTENDING.md)": {
        "steps": "Hooks ToolExecution ErrorDetail ToolErrorDetail",
        "validators": "HostRule HostRules",
        "contracts": "HostErrorCode",
    },
    "Usage, cost and budgets (docs/BUDGETS.md)": {
        "contracts": (
            "Budget BudgetMetric BudgetWindow BudgetScope BudgetRefusal Price PriceTable "
            "UnpricedPolicy UsageLedger UsageCall UsageQuery Charge BudgetCheck ReserveOutcome"
        ),
        "steps": "estimate_prompt_tokens",
        "engine": "usage_report UsageReport UsageGroup UsageGroupBy UsageTotals BudgetStanding",
    },
    "What a turn did, in its TurnReport": {
        "steps": "ModeChange ToolCallRecord ToolCallFate ToolCallSide RejectionKind",
    },
    "The request and the response (AGN-034, AGN-033)": {
        "contracts": (
            "AgentExecuteRequest AgentExecuteResponse InvokeResult InvokeError "
            "InvokeWarning ErrorCode ContextType ResponseKind ResponseType "
            "FileRef Usage InputArtifact ClipboardImage ArtifactEncoding "
            "ArtifactOrigin RagOperator RagScopeCondition WorkspaceHints "
            "ToolCall ToolResult"
        ),
    },
    "The caller and the turn's context (AGN-036 §3)": {
        "contracts": (
            "Caller PipelineContext PipelineStep Envelope AgentContext "
            "ConversationContext Session Turn TurnStatus ModeHistoryEntry "
            "StoredOutcome ResponsePayload DEFAULT_MODE ForkPoint"
        ),
    },
    "The ports a host plugs in (docs/EXTENDING.md)": {
        "contracts": (
            "SessionStore SessionTransaction SessionForks LLM StreamingLLM ModeCatalog "
            "AgentCatalog ToolExecutor FileStore Retriever Clock IdSource"
        ),
    },
    "The values the ports carry": {
        "contracts": (
            "ToolInvocation ToolOutput ToolPause ToolFile StoredFile RetrievalQuery "
            "Passage PassageSource LLMRequest LLMReply ReplyChunk ReplyTextDelta "
            "ReplyToolCallDelta ReplyFinished ReplyAssembler split_reply "
            "ChatMessage ChatRole ContentPart TextPart ImagePart ModeSpec "
            "ToolDefinition SourceType"
        ),
    },
    "Server-tool effects exactly once (docs/TOOLS.md)": {
        "contracts": "ToolLedger LedgerEntry Idempotence",
        "steps": (
            "run_ledgered LedgeredTool tool_call_key PossiblyExecutedPolicy "
            "ToolPossiblyExecutedError"
        ),
    },
    "Errors": {
        "contracts": (
            "AptixPipelineError PermanentPortError StoreConflictError MalformedStreamError "
            "ForkRefusedError ForkRefusal"
        ),
        "engine": "ToolRoutingError",
    },
    "Rules and validators (AGN-036, AGN-034, AGN-033)": {
        "validators": (
            "Rule all_rules parse_request parse_response validate_core "
            "validate_post_step validate_pre_step validate_request "
            "validate_response validate_tool_call_manifest"
        ),
    },
    "Events and the state trace (docs/EVENTS.md)": {
        "engine": (
            "Listener TurnEvent TurnStarted TurnIdentified StepStarted StepEnded TransitionTaken "
            "CheckRan ModelCallStarted ModelFirstChunk ModelTextDelta "
            "RetrievalStarted RetrievalFinished ModelCallRetried ModelCallFinished "
            "ToolCallHandled ToolExecutionStarted ToolExecuted ModeChanged "
            "WarningRaised TurnFaulted TurnFinished StateTrace TransitionRecord "
            "CheckRecord FaultRecord LLMCallRecord RetrievalRecord CallUsage"
        ),
    },
    "Recording and replay (docs/RECORDING.md)": {
        "engine.replay": (
            "Recorder RecordingOptions TurnRecording PortCall RecordedError "
            "RECORDING_FORMAT write_recording replay replay_sync "
            "assert_replays recordings_in ReplayOutcome Divergence LivePorts "
            "ReplayDivergenceError"
        ),
    },
    "Evals from recordings (docs/EVALS.md)": {
        "engine.replay": "evaluate Evaluation Expectations TurnFacts",
        "adapters": (
            "Candidate load_cases run_evals EvalReport report_table report_json "
            "report_junit report_html capture_cases CaptureError RecordedStore"
        ),
    },
    "Diagrams (docs/MACHINE.md)": {
        "engine": "pipeline_diagram diagram_text DiagramFormat DiagramError GraphvizMissingError",
    },
    "The embedded defaults and the adapters": {
        "adapters": (
            "embedded_pipeline open_store MemoryStore SQLiteStore PostgresStore "
            "ScriptedLLM TurnScript OpenAICompatibleLLM StreamBrokenError FtsRetriever "
            "build_index ConfigCatalog BUILTIN_TOOLS LocalFileStore SystemClock "
            "SteppingClock RandomIds SequentialIds ServiceConfig HostExtension create_app"
        ),
    },
    "Durable turns on Temporal (docs/DURABLE.md)": {
        "adapters": (
            "durable_pipeline durable_worker DurablePipeline DurableStream DurableProgress "
            "DurableWorker DurableSettings TemporalConfig BlobStore DirectoryBlobs"
        ),
    },
    "MCP servers as server tools (docs/MCP.md)": {
        "adapters": "StdioServer HttpServer McpPool",
    },
    "A store of your own (docs/STORES.md)": {
        "adapters": (
            "StoreBackend BufferedTransaction TurnWrites SessionWrite TurnWrite outcome_replaceable"
        ),
        "contracts": "Transcript",
        "testing": "StoreContract",
    },
}
"""The public names, grouped as the README and docs/ present them: each group maps
the subpackage its names come from to the names, separated by spaces."""


_EXPORTS: dict[str, str] = {
    name: subpackage
    for subpackages in _GROUPS.values()
    for subpackage, names in subpackages.items()
    for name in names.split()
}
"""Each public name and the subpackage it comes from."""

__all__ = [
    "BUILTIN_TOOLS",
    "DEFAULT_MODE",
    "LLM",
    "PROGRESS_EVENTS",
    "RECORDING_FORMAT",
    "STEP_FUNCTIONS",
    "AgentCatalog",
    "AgentContext",
    "AgentExecuteRequest",
    "AgentExecuteResponse",
    "AptixPipelineError",
    "ArtifactEncoding",
    "ArtifactOrigin",
    "BlobStore",
    "Budget",
    "BudgetCheck",
    "BudgetMetric",
    "BudgetRefusal",
    "BudgetScope",
    "BudgetStanding",
    "BudgetWindow",
    "BufferedTransaction",
    "CallUsage",
    "Caller",
    "Candidate",
    "CaptureError",
    "Charge",
    "ChatMessage",
    "ChatRole",
    "CheckRan",
    "CheckRecord",
    "ClipboardImage",
    "Clock",
    "ConfigCatalog",
    "ContentPart",
    "ContextType",
    "ConversationContext",
    "DiagramError",
    "DiagramFormat",
    "DirectoryBlobs",
    "Divergence",
    "DurablePipeline",
    "DurableProgress",
    "DurableSettings",
    "DurableStream",
    "DurableWorker",
    "Envelope",
    "ErrorCode",
    "ErrorDetail",
    "EvalReport",
    "Evaluation",
    "Expectations",
    "FaultRecord",
    "FileRef",
    "FileStore",
    "ForkPoint",
    "ForkRefusal",
    "ForkRefusedError",
    "FtsRetriever",
    "GraphvizMissingError",
    "Hooks",
    "HostErrorCode",
    "HostExtension",
    "HostRule",
    "HostRules",
    "HttpServer",
    "IdSource",
    "Idempotence",
    "ImagePart",
    "InputArtifact",
    "InvokeError",
    "InvokeResult",
    "InvokeWarning",
    "LLMCallRecord",
    "LLMReply",
    "LLMRequest",
    "LedgerEntry",
    "LedgeredTool",
    "Listener",
    "LivePorts",
    "LocalFileStore",
    "MalformedStreamError",
    "McpPool",
    "MemoryStore",
    "ModeCatalog",
    "ModeChange",
    "ModeChanged",
    "ModeHistoryEntry",
    "ModeSpec",
    "ModelCallFinished",
    "ModelCallRetried",
    "ModelCallStarted",
    "ModelFirstChunk",
    "ModelTextDelta",
    "OpenAICompatibleLLM",
    "Passage",
    "PassageSource",
    "PermanentPortError",
    "Pipeline",
    "PipelineContext",
    "PipelineOptions",
    "PipelineStep",
    "PortCall",
    "Ports",
    "PossiblyExecutedPolicy",
    "PostgresStore",
    "Price",
    "PriceTable",
    "Proceed",
    "RagOperator",
    "RagScopeCondition",
    "RandomIds",
    "RecordedError",
    "RecordedStore",
    "Recorder",
    "RecordingOptions",
    "RejectionKind",
    "ReplayDivergenceError",
    "ReplayOutcome",
    "ReplyAssembler",
    "ReplyChunk",
    "ReplyFinished",
    "ReplyTextDelta",
    "ReplyToolCallDelta",
    "RequestInput",
    "ReserveOutcome",
    "ResponseKind",
    "ResponsePayload",
    "ResponseType",
    "RetrievalFinished",
    "RetrievalQuery",
    "RetrievalRecord",
    "RetrievalStarted",
    "Retriever",
    "Rule",
    "Runtime",
    "SQLiteStore",
    "ScriptedLLM",
    "SequentialIds",
    "ServiceConfig",
    "Session",
    "SessionForks",
    "SessionStore",
    "SessionTransaction",
    "SessionWrite",
    "SourceType",
    "SpanMode",
    "StateTrace",
    "StdioServer",
    "StepEnded",
    "StepFaultError",
    "StepFunction",
    "StepStarted",
    "SteppingClock",
    "StoreBackend",
    "StoreConflictError",
    "StoreContract",
    "StoredFile",
    "StoredOutcome",
    "StreamBrokenError",
    "StreamDelta",
    "StreamItem",
    "StreamProgress",
    "StreamResult",
    "StreamingLLM",
    "SystemClock",
    "Telemetry",
    "TemporalConfig",
    "TextPart",
    "ToolCall",
    "ToolCallFate",
    "ToolCallHandled",
    "ToolCallRecord",
    "ToolCallSide",
    "ToolDefinition",
    "ToolErrorDetail",
    "ToolExecuted",
    "ToolExecution",
    "ToolExecutionStarted",
    "ToolExecutor",
    "ToolFile",
    "ToolInvocation",
    "ToolLedger",
    "ToolOutput",
    "ToolPause",
    "ToolPossiblyExecutedError",
    "ToolResult",
    "ToolRoutingError",
    "Transcript",
    "TransitionRecord",
    "TransitionTaken",
    "Turn",
    "TurnCall",
    "TurnEvent",
    "TurnFacts",
    "TurnFaulted",
    "TurnFinished",
    "TurnIdentified",
    "TurnInterceptor",
    "TurnRecording",
    "TurnReport",
    "TurnScope",
    "TurnScript",
    "TurnStarted",
    "TurnStatus",
    "TurnStream",
    "TurnWrite",
    "TurnWrites",
    "UnpricedPolicy",
    "Usage",
    "UsageCall",
    "UsageGroup",
    "UsageGroupBy",
    "UsageLedger",
    "UsageQuery",
    "UsageReport",
    "UsageTotals",
    "WarningRaised",
    "WorkspaceHints",
    "all_rules",
    "assert_replays",
    "build_index",
    "capture_cases",
    "create_app",
    "diagram_text",
    "durable_pipeline",
    "durable_worker",
    "embedded_pipeline",
    "estimate_prompt_tokens",
    "evaluate",
    "load_cases",
    "open_store",
    "outcome_replaceable",
    "parse_request",
    "parse_response",
    "pipeline_diagram",
    "progress_json",
    "recordings_in",
    "replay",
    "replay_sync",
    "report_html",
    "report_json",
    "report_junit",
    "report_table",
    "run_evals",
    "run_ledgered",
    "split_reply",
    "tool_call_key",
    "usage_report",
    "validate_core",
    "validate_post_step",
    "validate_pre_step",
    "validate_request",
    "validate_response",
    "validate_tool_call_manifest",
    "write_recording",
]


# Hidden from type checkers, which see the imports above: a misspelt name is an error.
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
