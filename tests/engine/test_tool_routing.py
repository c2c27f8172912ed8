"""Where a tool runs, and the pipeline's refusal of executors that do not match it.

A ``ToolDefinition`` says where it runs (``executes_on``, no default in Python;
the TOML catalog's table decides when left out). Building a pipeline refuses a
server tool without an executor, an executor for a client tool and an executor
for a tool no mode offers (``engine/tool_routing.py``), at once for a catalog
that can be read at once and through ``await Pipeline.verify()`` for a host's
catalog. ``embedded_pipeline`` takes any object that is both catalog ports
(``CatalogPorts``; this file is type-checked with ``mypy --strict``), and the
demo tools come only with the built-in catalog or when asked for.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from engine_kit import CALLER, SUPPORT_CATALOG, call, calls, text
from pydantic import ValidationError
from repo import ROOT

from aptix_pipeline import (
    BUILTIN_TOOLS,
    AgentContext,
    AptixPipelineError,
    ConfigCatalog,
    ConversationContext,
    MemoryStore,
    ModeSpec,
    Pipeline,
    Ports,
    ScriptedLLM,
    SequentialIds,
    SteppingClock,
    ToolDefinition,
    ToolExecutor,
    ToolInvocation,
    ToolRoutingError,
    embedded_pipeline,
)
from aptix_pipeline.adapters.config.service import load_service_config
from aptix_pipeline.adapters.embedded import build_pipeline
from aptix_pipeline.contracts import ResponseKind

LOOKUP = ToolDefinition(
    name="lookup",
    executes_on="server",
    description="A ticket's status, by its id.",
    parameters={"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]},
)
OPEN_FILE = ToolDefinition(name="open_file", executes_on="client")


async def lookup(arguments: dict[str, Any], invocation: ToolInvocation) -> str:
    """The host's server tool: a ticket's status, and who asked."""
    return json.dumps({"id": arguments["id"], "status": "open", "asked_by": invocation.user})


class HostCatalog:
    """A host's own catalog: both ports, on dicts, and nothing else (no ``all_modes``)."""

    def __init__(self, *server_tools: ToolDefinition) -> None:
        general = ModeSpec(name="general", display_name="General", server_tools=server_tools)
        self.modes = {"general": general}
        self.agent = AgentContext(id="support", name="Support", client_tools=[OPEN_FILE])
        self.conversation = ConversationContext(id="desk", instructions="Be brief.")

    async def get_mode(self, mode: str) -> ModeSpec | None:
        return self.modes.get(mode)

    async def list_modes(self) -> list[ModeSpec]:
        return list(self.modes.values())

    async def get_agent_context(self, agent_context_id: str | None) -> AgentContext | None:
        return self.agent if agent_context_id in (None, self.agent.id) else None

    async def get_conversation_context(
        self, conversation_context_id: str | None
    ) -> ConversationContext | None:
        known = conversation_context_id in (None, self.conversation.id)
        return self.conversation if known else None


class ListedHostCatalog(HostCatalog):
    """A host catalog held in memory that lets the pipeline read it at once."""

    def all_modes(self) -> list[ModeSpec]:
        return list(self.modes.values())

    def all_agents(self) -> list[AgentContext]:
        return [self.agent]


def host_ports(catalog: HostCatalog, tools: dict[str, ToolExecutor]) -> Ports:
    return Ports(
        store=MemoryStore(),
        llm=ScriptedLLM([text("done")]),
        modes=catalog,
        agents=catalog,
        clock=SteppingClock(),
        ids=SequentialIds(),
        tools=tools,
    )


def support_catalog() -> ConfigCatalog:
    """``SUPPORT_CATALOG``, read: the server tool ``lookup`` and the client tool ``open_file``."""
    return ConfigCatalog.from_toml(SUPPORT_CATALOG)


DEMO_COPY = """
[[modes]]
name = "general"
display_name = "General"
server_tools = ["Add"]

[[server_tools]]
name = "Add"
parameters = { type = "object", properties = { a = { type = "number" }, b = { type = "number" } } }

[[agents]]
id = "assistant"
name = "Assistant"

[[conversations]]
id = "workspace"
"""


# --- where a tool runs ----------------------------------------------------------------------


@pytest.mark.decision("D283")
def test_a_tool_definition_that_does_not_say_where_it_runs_is_refused_naming_it() -> None:
    with pytest.raises(ValidationError) as refused:
        ToolDefinition.model_validate({"Name": "lookup", "Description": "A ticket's status."})

    message = str(refused.value)
    assert "'lookup'" in message
    assert "executes_on='server'" in message
    assert "executes_on='client'" in message


@pytest.mark.decision("D283")
def test_a_tool_definition_from_the_wire_keeps_where_it_runs() -> None:
    wire = LOOKUP.to_wire()

    assert wire["ExecutesOn"] == "server"
    assert ToolDefinition.model_validate(wire) == LOOKUP


@pytest.mark.decision("D283")
async def test_the_toml_table_says_where_a_tool_runs_when_executes_on_is_left_out() -> None:
    catalog = ConfigCatalog.from_toml(SUPPORT_CATALOG)

    mode = await catalog.get_mode("general")
    agent = await catalog.get_agent_context(None)

    assert mode is not None
    assert agent is not None
    assert [(t.name, t.executes_on) for t in mode.server_tools] == [("lookup", "server")]
    assert [(t.name, t.executes_on) for t in agent.client_tools] == [("open_file", "client")]


@pytest.mark.decision("D283")
def test_the_configuration_page_documents_the_tables_default() -> None:
    page = (ROOT / "docs" / "CONFIGURATION.md").read_text(encoding="utf-8")

    assert 'defaults to `"server"` in `[[server_tools]]`' in page
    assert 'to `"client"` in `[[agents.client_tools]]`' in page


# --- the three refusals -------------------------------------------------------------------


@pytest.mark.decision("D284")
def test_a_server_tool_without_an_executor_is_refused_naming_it() -> None:
    with pytest.raises(ToolRoutingError) as refused:
        embedded_pipeline(llm=ScriptedLLM([]), catalog=support_catalog())

    assert str(refused.value) == (
        "server tool 'lookup' (offered by mode 'general') has no executor: register one "
        "under 'lookup' (Ports.tools, embedded_pipeline(tools=...)), or declare the tool "
        "executes_on='client'"
    )
    assert [(p.kind, p.tool) for p in refused.value.problems] == [("no_executor", "lookup")]


@pytest.mark.decision("D284")
def test_an_executor_for_a_client_tool_is_refused_naming_it() -> None:
    tools = {"lookup": lookup, "open_file": lookup}

    with pytest.raises(ToolRoutingError) as refused:
        embedded_pipeline(llm=ScriptedLLM([]), catalog=support_catalog(), tools=tools)

    message = str(refused.value)
    assert message.startswith("tool 'open_file' has an executor but is declared for the client")
    assert "agent 'support'" in message
    assert [(p.kind, p.tool) for p in refused.value.problems] == [
        ("client_tool_executor", "open_file")
    ]


@pytest.mark.decision("D284")
def test_an_executor_for_a_tool_no_mode_offers_is_refused_naming_it() -> None:
    tools = {"lookup": lookup, "lookup_order": lookup}

    with pytest.raises(ToolRoutingError) as refused:
        embedded_pipeline(llm=ScriptedLLM([]), catalog=support_catalog(), tools=tools)

    assert str(refused.value) == (
        "executor 'lookup_order' runs no tool: no mode offers a tool named 'lookup_order'; "
        "add the tool to a mode's server tools, or remove the executor"
    )
    assert [(p.kind, p.tool) for p in refused.value.problems] == [
        ("unoffered_executor", "lookup_order")
    ]


@pytest.mark.decision("D284")
def test_every_mismatch_is_named_one_per_line() -> None:
    with pytest.raises(ToolRoutingError) as refused:
        embedded_pipeline(
            llm=ScriptedLLM([]),
            catalog=support_catalog(),
            tools={"open_file": lookup, "zzz": lookup},
        )

    lines = str(refused.value).splitlines()
    assert [line.split(" ")[:3] for line in lines] == [
        ["server", "tool", "'lookup'"],
        ["tool", "'open_file'", "has"],
        ["executor", "'zzz'", "runs"],
    ]


@pytest.mark.decision("D284")
def test_the_refusal_is_the_engines_own_error_and_a_value_error() -> None:
    with pytest.raises(ToolRoutingError) as refused:
        Pipeline(host_ports(ListedHostCatalog(LOOKUP), {}))

    assert isinstance(refused.value, AptixPipelineError)
    assert isinstance(refused.value, ValueError)


@pytest.mark.decision("D284")
@pytest.mark.parametrize(
    ("tools", "kind", "tool"),
    [
        pytest.param({}, "no_executor", "lookup", id="server-tool-without-executor"),
        pytest.param(
            {"lookup": lookup, "open_file": lookup},
            "client_tool_executor",
            "open_file",
            id="executor-for-a-client-tool",
        ),
        pytest.param(
            {"lookup": lookup, "refund": lookup}, "unoffered_executor", "refund", id="unoffered"
        ),
    ],
)
async def test_verify_refuses_a_host_catalogs_mismatch_naming_the_tool(
    tools: dict[str, ToolExecutor], kind: str, tool: str
) -> None:
    pipeline = Pipeline(host_ports(HostCatalog(LOOKUP), tools))  # read by awaiting: not yet

    with pytest.raises(ToolRoutingError) as refused:
        await pipeline.verify()

    assert [(p.kind, p.tool) for p in refused.value.problems] == [(kind, tool)]
    assert f"'{tool}'" in str(refused.value)


@pytest.mark.decision("D284")
async def test_a_mode_tool_declared_for_the_client_with_an_executor_is_refused() -> None:
    # The mistake the required executes_on prevents: a host meant a server tool.
    meant_for_the_server = LOOKUP.model_copy(update={"executes_on": "client"})
    pipeline = Pipeline(host_ports(HostCatalog(meant_for_the_server), {"lookup": lookup}))

    with pytest.raises(ToolRoutingError, match=r"^tool 'lookup' has an executor but is declared "):
        await pipeline.verify()


@pytest.mark.decision("D284")
def test_a_host_catalog_that_can_be_read_at_once_is_checked_when_the_pipeline_is_built() -> None:
    with pytest.raises(ToolRoutingError, match="'lookup'"):
        Pipeline(host_ports(ListedHostCatalog(LOOKUP), {}))


@pytest.mark.decision("D284")
async def test_a_correct_host_setup_builds_and_verifies() -> None:
    for catalog in (HostCatalog(LOOKUP), ListedHostCatalog(LOOKUP)):
        pipeline = Pipeline(host_ports(catalog, {"lookup": lookup}))

        await pipeline.verify()


@pytest.mark.decision("D284", "D29")
async def test_the_engines_mode_tool_needs_no_executor_and_may_have_the_hosts() -> None:
    async def host_mode_change(arguments: dict[str, Any], invocation: ToolInvocation) -> str:
        return json.dumps({"mode": arguments["mode"]})

    pipeline = embedded_pipeline(llm=ScriptedLLM([]), tools={"agent_change_mode": host_mode_change})

    await pipeline.verify()
    assert pipeline.ports.tools["agent_change_mode"] is host_mode_change


@pytest.mark.decision("D284")
async def test_a_container_needs_no_executor_its_members_do() -> None:
    pipeline = embedded_pipeline(llm=ScriptedLLM([]))  # Math holds Add and Multiply
    without_add = {name: run for name, run in pipeline.ports.tools.items() if name != "Add"}

    await pipeline.verify()
    with pytest.raises(ToolRoutingError) as refused:
        Pipeline(replace(pipeline.ports, tools=without_add))

    assert "Math" not in pipeline.ports.tools
    assert [(p.kind, p.tool) for p in refused.value.problems] == [("no_executor", "Add")]


# --- a host's server tool and catalog, end to end --------------------------------------------


@pytest.mark.decision("D283")
async def test_a_host_server_tool_runs_on_the_server_not_on_the_client() -> None:
    llm = ScriptedLLM([calls(call("t1", "lookup", {"id": "T-7"})), text("T-7 is open.")])
    pipeline = embedded_pipeline(llm=llm, catalog=HostCatalog(LOOKUP), tools={"lookup": lookup})
    await pipeline.verify()

    report = await pipeline.run({"Instruction": "How is T-7?"}, CALLER)

    assert report.result.result is not None
    assert report.result.result.kind is ResponseKind.FINAL
    assert report.result.result.tool_calls is None
    assert [(c.name, c.side, c.outcome) for c in report.tool_calls] == [
        ("lookup", "server", "executed")
    ]
    answer = llm.requests[1].messages[-1]
    assert json.loads(answer.content or "") == {"id": "T-7", "status": "open", "asked_by": "ana"}


@pytest.mark.decision("D286")
async def test_a_host_catalog_class_runs_a_turn_through_embedded_pipeline() -> None:
    catalog = HostCatalog(LOOKUP)
    llm = ScriptedLLM([calls(call("c1", "open_file", {"path": "a.py"}))])
    pipeline = embedded_pipeline(llm=llm, catalog=catalog, tools={"lookup": lookup})

    result = await pipeline.execute({"Instruction": "Open a.py"}, CALLER)

    assert result.result is not None, result.errors
    assert result.result.kind is ResponseKind.CLIENT_TOOL_CONTINUATION
    assert result.result.mode_display_name == "General"
    assert [c.name for c in result.result.tool_calls or []] == ["open_file"]
    assert [t.name for t in llm.requests[0].tools] == ["open_file", "lookup", "agent_change_mode"]
    assert "Be brief." in (llm.requests[0].messages[0].content or "")


# --- the demo tools ---------------------------------------------------------------------------


@pytest.mark.decision("D285")
async def test_embedded_pipeline_without_demo_tools_does_not_offer_add() -> None:
    llm = ScriptedLLM([calls(call("a1", "Add", {"a": 1, "b": 2})), text("no adding")])
    pipeline = embedded_pipeline(llm=llm, catalog=HostCatalog(LOOKUP), tools={"lookup": lookup})

    report = await pipeline.run({"Instruction": "1 + 2?"}, CALLER)

    assert set(pipeline.ports.tools) == {"lookup"}
    assert "Add" not in [tool.name for tool in llm.requests[0].tools]
    assert [(c.name, c.side, c.outcome) for c in report.tool_calls] == [
        ("Add", "unknown", "rejected")
    ]


@pytest.mark.decision("D285")
def test_the_built_in_catalog_brings_its_demo_tools() -> None:
    pipeline = embedded_pipeline(llm=ScriptedLLM([]))

    assert dict(pipeline.ports.tools) == dict(BUILTIN_TOOLS)
    assert dict(ConfigCatalog.default().tools) == dict(BUILTIN_TOOLS)


@pytest.mark.decision("D285")
def test_a_catalog_file_brings_the_demo_tools_only_when_asked(tmp_path: Path) -> None:
    path = tmp_path / "catalog.toml"
    path.write_text(DEMO_COPY, encoding="utf-8")

    with pytest.raises(ToolRoutingError, match="server tool 'Add'"):
        embedded_pipeline(llm=ScriptedLLM([]), config=path)
    asked = embedded_pipeline(llm=ScriptedLLM([]), config=path, demo_tools=True)

    assert dict(asked.ports.tools) == {"Add": BUILTIN_TOOLS["Add"]}  # only what a mode offers
    assert dict(ConfigCatalog.from_file(path, demo_tools=True).tools) == dict(asked.ports.tools)
    assert dict(ConfigCatalog.from_file(path).tools) == {}


@pytest.mark.decision("D285")
async def test_asked_demo_tools_run_with_a_catalog_of_ones_own() -> None:
    llm = ScriptedLLM([calls(call("a1", "Add", {"a": 1, "b": 2})), text("3")])
    catalog = ConfigCatalog.from_toml(DEMO_COPY)
    pipeline = embedded_pipeline(llm=llm, catalog=catalog, demo_tools=True)

    report = await pipeline.run({"Instruction": "1 + 2?"}, CALLER)

    assert [(c.name, c.outcome) for c in report.tool_calls] == [("Add", "executed")]
    assert json.loads(llm.requests[1].messages[-1].content or "") == {"result": 3}


@pytest.mark.decision("D285")
def test_the_example_service_configuration_brings_the_demo_tools_it_offers() -> None:
    config = load_service_config(
        ROOT / "examples" / "aptix.toml", env={"APTIX_KEY_ANA": "k", "OPENAI_API_KEY": "sk-test"}
    )

    pipeline = build_pipeline(config, llm=ScriptedLLM([]), store="memory")

    assert dict(pipeline.ports.tools) == dict(BUILTIN_TOOLS)
