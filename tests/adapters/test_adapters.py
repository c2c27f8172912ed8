"""The small adapters: ScriptedLLM, ConfigCatalog, open_store, clocks, ids, embedded_pipeline."""

from __future__ import annotations

import asyncio
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from repo import ROOT

from aptix_pipeline.adapters.config.catalog import CatalogError, ConfigCatalog
from aptix_pipeline.adapters.embedded import embedded_pipeline, open_store
from aptix_pipeline.adapters.models.scripted import ScriptedLLM, ScriptError, ScriptExhaustedError
from aptix_pipeline.adapters.stores.memory import MemoryStore
from aptix_pipeline.adapters.stores.sqlite import SQLiteStore
from aptix_pipeline.adapters.system.clocks import SteppingClock, SystemClock
from aptix_pipeline.adapters.system.ids import RandomIds, SequentialIds
from aptix_pipeline.contracts import (
    LLM,
    AgentCatalog,
    Caller,
    ChatMessage,
    ChatRole,
    Clock,
    IdSource,
    LLMReply,
    LLMRequest,
    ModeCatalog,
    PermanentPortError,
    ResponseKind,
    ToolCall,
    Usage,
)


def request(text: str = "hi", mode: str = "general") -> LLMRequest:
    return LLMRequest(mode=mode, messages=[ChatMessage(role=ChatRole.USER, content=text)])


# --- ScriptedLLM ---------------------------------------------------------------------


def test_scripted_llm_is_an_llm_port() -> None:
    assert isinstance(ScriptedLLM([]), LLM)


async def test_scripted_text_reply_is_a_final_answer() -> None:
    llm = ScriptedLLM([{"text": "hello"}])

    reply = await llm.complete(request())

    assert reply.text == "hello"
    assert reply.tool_calls == []
    assert reply.finish_reason == "stop"
    assert reply.model == "scripted"
    assert reply.usage is None


async def test_scripted_tool_calls_take_object_or_string_arguments() -> None:
    llm = ScriptedLLM(
        [
            {
                "text": "let me look",
                "tool_calls": [
                    {"id": "call_1", "name": "read_file", "arguments": {"path": "a.py"}},
                    {"id": "call_2", "name": "run_tests", "arguments": '{"pattern": "test_x"}'},
                    {"id": "call_3", "name": "Math"},
                ],
            }
        ]
    )

    reply = await llm.complete(request())

    assert reply.text == "let me look"
    assert reply.finish_reason == "tool_calls"
    assert [(c.tool_call_id, c.name) for c in reply.tool_calls] == [
        ("call_1", "read_file"),
        ("call_2", "run_tests"),
        ("call_3", "Math"),
    ]
    assert json.loads(reply.tool_calls[0].arguments_json) == {"path": "a.py"}
    assert reply.tool_calls[1].arguments_json == '{"pattern": "test_x"}'
    assert json.loads(reply.tool_calls[2].arguments_json) == {}


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        (
            {"input_tokens": 10, "output_tokens": 5},
            Usage(input_tokens=10, output_tokens=5, total_tokens=15),
        ),
        ({"input_tokens": 7}, Usage(input_tokens=7, output_tokens=0, total_tokens=7)),
        (
            {"input_tokens": 1, "output_tokens": 2, "total_tokens": 9},
            Usage(input_tokens=1, output_tokens=2, total_tokens=9),
        ),
        ({}, Usage(input_tokens=0, output_tokens=0, total_tokens=0)),
    ],
    ids=["total-computed", "output-defaults-to-0", "total-given", "empty"],
)
async def test_scripted_usage_is_parsed_and_total_computed_when_absent(
    usage: dict[str, int], expected: Usage
) -> None:
    llm = ScriptedLLM([{"text": "ok", "usage": usage, "model": "gpt-test"}])

    reply = await llm.complete(request())

    assert reply.usage == expected
    assert reply.model == "gpt-test"


async def test_scripted_llm_accepts_ready_made_replies() -> None:
    made = LLMReply(text="made", model="m")
    llm = ScriptedLLM([made])

    assert await llm.complete(request()) == made


@pytest.mark.parametrize(
    "text",
    [
        '[{"text": "one"}, {"tool_calls": [{"id": "c1", "name": "read_file"}]}]',
        '{"replies": [{"text": "one"}, {"tool_calls": [{"id": "c1", "name": "read_file"}]}]}',
    ],
    ids=["list", "replies-object"],
)
async def test_script_from_json_in_either_form(text: str) -> None:
    llm = ScriptedLLM.from_json(text)

    first, second = await llm.complete(request()), await llm.complete(request())

    assert first.text == "one"
    assert [c.name for c in second.tool_calls] == ["read_file"]


async def test_script_from_file(tmp_path: Path) -> None:
    path = tmp_path / "script.json"
    path.write_text(json.dumps({"replies": [{"text": "from a file"}]}), encoding="utf-8")

    llm = ScriptedLLM.from_file(path)

    assert llm.remaining == 1
    assert (await llm.complete(request())).text == "from a file"


MALFORMED: dict[str, tuple[Any, str]] = {
    "reply-not-object": (["hello"], "replies[0]"),
    "unknown-key": ([{"text": "a"}, {"text": "b", "txt": "c"}], "replies[1]"),
    "neither-text-nor-calls": ([{"text": "a"}, {"model": "m"}], "replies[1]"),
    "text-not-text": ([{"text": 3}], "replies[0].text"),
    "empty-tool-calls": ([{"tool_calls": []}], "replies[0].tool_calls"),
    "tool-calls-not-list": ([{"tool_calls": {"id": "c"}}], "replies[0].tool_calls"),
    "call-not-object": ([{"tool_calls": ["read_file"]}], "replies[0].tool_calls[0]"),
    "call-unknown-key": (
        [{"tool_calls": [{"id": "c", "name": "n", "args": {}}]}],
        "replies[0].tool_calls[0]",
    ),
    "call-missing-id": (
        [{"text": "a"}, {"tool_calls": [{"id": "c", "name": "n"}, {"name": "n"}]}],
        "replies[1].tool_calls[1].id",
    ),
    "call-empty-id": ([{"tool_calls": [{"id": "", "name": "n"}]}], "replies[0].tool_calls[0].id"),
    "call-missing-name": ([{"tool_calls": [{"id": "c"}]}], "replies[0].tool_calls[0].name"),
    "usage-not-object": ([{"text": "a", "usage": 10}], "replies[0].usage"),
    "usage-unknown-key": ([{"text": "a", "usage": {"prompt_tokens": 1}}], "replies[0].usage"),
    "usage-negative": (
        [{"text": "a"}, {"text": "b", "usage": {"input_tokens": -1}}],
        "replies[1].usage.input_tokens",
    ),
    "usage-bool": (
        [{"text": "a", "usage": {"output_tokens": True}}],
        "replies[0].usage.output_tokens",
    ),
    "usage-float-total": (
        [{"text": "a", "usage": {"total_tokens": 1.5}}],
        "replies[0].usage.total_tokens",
    ),
    "model-not-text": ([{"text": "a", "model": 4}], "replies[0].model"),
}


@pytest.mark.parametrize(("script", "where"), MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_script_names_the_position(script: Any, where: str) -> None:
    with pytest.raises(ScriptError, match=re.escape(where)):
        ScriptedLLM.from_json(json.dumps(script))
    with pytest.raises(ScriptError, match=re.escape(where)):
        ScriptedLLM(script)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("not json at all", "not JSON"),
        ('{"replies": [], "extra": 1}', '"replies"'),
        ('{"reply": []}', '"replies"'),
        ('"a string"', "list of replies"),
        ("42", "list of replies"),
        ('{"replies": {"text": "a"}}', "list of replies"),
    ],
    ids=["not-json", "extra-key", "wrong-key", "string", "number", "replies-not-list"],
)
def test_script_that_is_not_a_list_of_replies_is_refused(text: str, problem: str) -> None:
    with pytest.raises(ScriptError, match=re.escape(problem)):
        ScriptedLLM.from_json(text)


async def test_exhausted_script_raises_a_permanent_port_error() -> None:
    llm = ScriptedLLM([{"text": "only"}])
    await llm.complete(request())

    with pytest.raises(ScriptExhaustedError, match="1 replies") as raised:
        await llm.complete(request("again"))

    assert isinstance(raised.value, PermanentPortError)
    assert llm.remaining == 0
    assert [r.messages[0].content for r in llm.requests] == ["hi"]


async def test_scripted_llm_records_requests_and_counts_down() -> None:
    llm = ScriptedLLM([{"text": "1"}, {"text": "2"}, {"text": "3"}])
    assert llm.remaining == 3

    answers = []
    for index, mode in enumerate(["general", "review"]):
        answers.append((await llm.complete(request(f"q{index}", mode))).text)
        assert llm.remaining == 2 - index

    assert answers == ["1", "2"]
    assert [(r.mode, r.messages[0].content) for r in llm.requests] == [
        ("general", "q0"),
        ("review", "q1"),
    ]


async def test_scripted_reply_cannot_change_the_script() -> None:
    made = LLMReply(tool_calls=[ToolCall(tool_call_id="c", name="n", arguments_json="{}")])
    llm = ScriptedLLM([made])

    reply = await llm.complete(request())
    with pytest.raises(ValidationError):  # a reply is a frozen value: shared, never copied
        setattr(reply, "tool_calls", [])  # noqa: B010

    assert len(made.tool_calls) == 1


# --- ConfigCatalog -------------------------------------------------------------------


async def test_default_catalog_modes() -> None:
    catalog = ConfigCatalog.default()

    modes = await catalog.list_modes()
    general, review = await catalog.get_mode("general"), await catalog.get_mode("review")

    assert isinstance(catalog, ModeCatalog)
    assert [(m.name, m.display_name) for m in modes] == [
        ("general", "General"),
        ("review", "Code Review"),
    ]
    assert general is not None
    assert review is not None
    assert [t.name for t in general.server_tools] == ["Math", "Add", "Multiply"]
    assert [t.name for t in review.server_tools] == ["review_checklist"]
    assert all(t.executes_on == "server" for t in (*general.server_tools, *review.server_tools))
    assert await catalog.get_mode("nope") is None


async def test_default_catalog_math_container() -> None:
    general = await ConfigCatalog.default().get_mode("general")
    assert general is not None

    math, add, _ = general.server_tools

    assert math.is_container
    assert math.function_names == ("Add", "Multiply")
    assert math.function_count == 2
    assert add.member_of == "Math"
    assert add.parameters["required"] == ["a", "b"]


async def test_default_catalog_agents_and_conversations() -> None:
    catalog = ConfigCatalog.default()

    default_agent = await catalog.get_agent_context(None)
    named_agent = await catalog.get_agent_context("assistant")
    conversation = await catalog.get_conversation_context(None)

    assert isinstance(catalog, AgentCatalog)
    assert default_agent is not None
    assert default_agent == named_agent
    assert default_agent.id == "assistant"
    assert default_agent.model == "scripted"
    assert [t.name for t in default_agent.client_tools] == ["read_file", "run_tests"]
    assert all(t.executes_on == "client" for t in default_agent.client_tools)
    assert conversation is not None
    assert conversation.id == "workspace"
    assert conversation == await catalog.get_conversation_context("workspace")
    assert await catalog.get_agent_context("nobody") is None
    assert await catalog.get_conversation_context("nowhere") is None


async def test_catalog_answers_are_copies() -> None:
    catalog = ConfigCatalog.default()
    agent = await catalog.get_agent_context(None)
    assert agent is not None

    agent.client_tools.clear()
    agent.system_prompt = "changed"

    again = await catalog.get_agent_context(None)
    assert again is not None
    assert len(again.client_tools) == 2
    assert again.system_prompt != "changed"


MODE = '[[modes]]\nname = "general"\ndisplay_name = "General"\nserver_tools = ["lookup"]\n'
TOOL = '[[server_tools]]\nname = "lookup"\ndescription = "Look something up."\n'
AGENT = '[[agents]]\nid = "a1"\nname = "Agent one"\n'
CLIENT_TOOL = '[[agents.client_tools]]\nname = "open_file"\n'
CONVERSATION = '[[conversations]]\nid = "c1"\n'
MINIMAL = MODE + TOOL + AGENT + CLIENT_TOOL + CONVERSATION


async def test_minimal_catalog_loads_with_the_only_agent_as_default() -> None:
    catalog = ConfigCatalog.from_toml(MINIMAL)

    general = await catalog.get_mode("general")
    agent = await catalog.get_agent_context(None)
    conversation = await catalog.get_conversation_context(None)

    assert general is not None
    assert [(t.name, t.executes_on) for t in general.server_tools] == [("lookup", "server")]
    assert agent is not None
    assert agent.id == "a1"
    assert [(t.name, t.executes_on) for t in agent.client_tools] == [("open_file", "client")]
    assert conversation is not None
    assert conversation.id == "c1"


async def test_without_a_default_flag_several_agents_have_no_default() -> None:
    catalog = ConfigCatalog.from_toml(MINIMAL + '[[agents]]\nid = "a2"\nname = "Agent two"\n')

    assert await catalog.get_agent_context(None) is None
    assert await catalog.get_agent_context("a2") is not None


BAD_CATALOGS: dict[str, tuple[str, list[str]]] = {
    "no-general-mode": (
        MINIMAL.replace('name = "general"', 'name = "review"'),
        ["'general'", "required"],
    ),
    "unknown-server-tool": (
        MINIMAL.replace('["lookup"]', '["lookup", "nope"]'),
        ["'general'", "unknown server tools", "'nope'"],
    ),
    "duplicate-mode": (MINIMAL + MODE, ["mode 'general'", "twice"]),
    "duplicate-tool": (MINIMAL + TOOL, ["server tool 'lookup'", "twice"]),
    "duplicate-agent": (MINIMAL + AGENT, ["agent 'a1'", "twice"]),
    "duplicate-conversation": (MINIMAL + CONVERSATION, ["conversation 'c1'", "twice"]),
    "duplicate-client-tool": (
        MINIMAL.replace(CLIENT_TOOL, CLIENT_TOOL * 2),
        ["'open_file'", "twice"],
    ),
    "server-tool-on-client": (
        MINIMAL.replace(TOOL, TOOL + 'executes_on = "client"\n'),
        ["server_tools[0]", "executes_on = 'server'"],
    ),
    "client-tool-on-server": (
        MINIMAL.replace(CLIENT_TOOL, CLIENT_TOOL + 'executes_on = "server"\n'),
        ["agents[0].client_tools[0]", "executes_on = 'client'"],
    ),
    "server-agent-change-mode": (
        MINIMAL.replace('"lookup"', '"agent_change_mode"'),
        ["server_tools[0]", "agent_change_mode"],
    ),
    "client-agent-change-mode": (
        MINIMAL.replace('"open_file"', '"agent_change_mode"'),
        ["agents[0].client_tools[0]", "agent_change_mode"],
    ),
    "two-default-agents": (
        (MINIMAL + AGENT.replace("a1", "a2")).replace(
            'name = "Agent one"\n', 'name = "Agent one"\ndefault = true\n'
        ),
        ["more than one default agent", "'a1'", "'a2'"],
    ),
    "two-default-conversations": (
        MINIMAL + "default = true\n" + CONVERSATION.replace("c1", "c2") + "default = true\n",
        ["more than one default conversation"],
    ),
    "invalid-toml": (MINIMAL + "[[modes]\n", ["not valid TOML"]),
    "invalid-parameters-schema": (
        MINIMAL.replace(TOOL, TOOL + 'parameters = { type = "objekt" }\n'),
        ["server_tools[0]", "JSON Schema"],
    ),
    "unresolved-parameters-ref": (
        MINIMAL.replace(TOOL, TOOL + 'parameters = { "$ref" = "#/$defs/missing" }\n'),
        ["server_tools[0]", "$ref"],
    ),
    "bad-tool-name": (MINIMAL.replace('"lookup"', '"look up"'), ["server_tools[0]", "name"]),
    "unknown-top-level-key": ("colour = 'red'\n" + MINIMAL, ["colour"]),
    "unknown-mode-key": (MINIMAL.replace(MODE, MODE + "colour = 'red'\n"), ["modes.0.colour"]),
    "unknown-tool-key": (
        MINIMAL.replace(TOOL, TOOL + "colour = 'red'\n"),
        ["server_tools[0]", "colour"],
    ),
    "unknown-agent-key": (MINIMAL.replace(AGENT, AGENT + "colour = 'red'\n"), ["agents.0.colour"]),
    "unknown-conversation-key": (MINIMAL + "colour = 'red'\n", ["conversations.0.colour"]),
    "no-agents": (MODE + TOOL + CONVERSATION, ["agents"]),
    "empty-display-name": (MINIMAL.replace('"General"', '""'), ["modes.0.display_name"]),
}


@pytest.mark.parametrize(("text", "fragments"), BAD_CATALOGS.values(), ids=BAD_CATALOGS.keys())
def test_bad_catalog_is_refused_naming_the_problem(text: str, fragments: list[str]) -> None:
    with pytest.raises(CatalogError) as raised:
        ConfigCatalog.from_toml(text, source="team.toml")

    message = str(raised.value)
    for fragment in fragments:
        assert fragment in message, message


def test_catalog_from_file_names_the_file_in_errors(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(MINIMAL.replace('name = "general"', 'name = "review"'), encoding="utf-8")

    with pytest.raises(CatalogError, match=re.escape(str(path))):
        ConfigCatalog.from_file(path)


async def test_catalog_from_file_loads(tmp_path: Path) -> None:
    path = tmp_path / "good.toml"
    path.write_text(MINIMAL, encoding="utf-8")

    catalog = ConfigCatalog.from_file(path)

    assert [m.name for m in await catalog.list_modes()] == ["general"]


# --- open_store ----------------------------------------------------------------------


def test_open_store_memory() -> None:
    assert isinstance(open_store("memory"), MemoryStore)


@pytest.mark.parametrize(
    ("spec", "file"),
    [
        ("sqlite:a.db", "a.db"),
        ("sqlite:data/b", "data/b"),
        ("c.db", "c.db"),
        ("d.sqlite", "d.sqlite"),
        ("e.sqlite3", "e.sqlite3"),
    ],
)
def test_open_store_sqlite(
    spec: str, file: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()

    store = open_store(spec)
    try:
        assert isinstance(store, SQLiteStore)
        assert store.path.resolve() == (tmp_path / file).resolve()
        assert (tmp_path / file).is_file()
    finally:
        if isinstance(store, SQLiteStore):
            store.close()


def test_open_store_takes_a_path(tmp_path: Path) -> None:
    store = open_store(tmp_path / "p.db")
    try:
        assert isinstance(store, SQLiteStore)
        assert store.path == tmp_path / "p.db"
    finally:
        if isinstance(store, SQLiteStore):
            store.close()


@pytest.mark.parametrize(
    "spec", ["", "sqlite:", "mysql://ana:pw@localhost/aptix", "notes.txt", "Memory"]
)
def test_open_store_refuses_unknown_specs(
    spec: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)

    with pytest.raises(ValueError, match="sqlite"):
        open_store(spec)
    assert list(tmp_path.iterdir()) == []


# --- clocks and ids ------------------------------------------------------------------


def test_stepping_clock_advances_by_its_step() -> None:
    start = datetime(2030, 5, 6, 7, 8, 9, tzinfo=UTC)
    clock = SteppingClock(start, timedelta(seconds=5))

    readings = [clock.now() for _ in range(3)]

    assert isinstance(clock, Clock)
    assert readings == [start, start + timedelta(seconds=5), start + timedelta(seconds=10)]


def test_stepping_clock_defaults_are_aware_and_repeatable() -> None:
    one, two = SteppingClock(), SteppingClock()

    first = [one.now() for _ in range(3)]

    assert first == [two.now() for _ in range(3)]
    assert first[0].tzinfo is not None
    assert first[1] - first[0] == timedelta(milliseconds=1)


def test_stepping_clock_refuses_a_naive_start() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        SteppingClock(datetime(2026, 1, 1))


def test_system_clock_is_aware_utc() -> None:
    reading = SystemClock().now()

    assert reading.utcoffset() == timedelta(0)
    assert abs(datetime.now(UTC) - reading) < timedelta(minutes=1)


def test_sequential_ids_count_per_kind() -> None:
    ids = SequentialIds()

    issued = [ids.new_id(kind) for kind in ["session", "turn", "turn", "session", "correlation"]]

    assert isinstance(ids, IdSource)
    assert issued == ["session-1", "turn-1", "turn-2", "session-2", "correlation-1"]


def test_sequential_ids_prefix_and_independent_sources() -> None:
    prefixed, plain = SequentialIds("run7-"), SequentialIds()

    assert [prefixed.new_id("turn"), prefixed.new_id("turn")] == ["run7-turn-1", "run7-turn-2"]
    assert plain.new_id("turn") == "turn-1"


def test_random_ids_are_unique_and_prefixed() -> None:
    ids = RandomIds()

    issued = [ids.new_id("turn") for _ in range(500)]

    assert len(set(issued)) == 500
    assert all(re.fullmatch(r"turn_[0-9a-f]{32}", i) for i in issued)
    assert re.fullmatch(r"session_[0-9a-f]{32}", ids.new_id("session"))


# --- embedded_pipeline ---------------------------------------------------------------


async def test_embedded_pipeline_runs_an_initial_turn_on_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "embedded.db"
    llm = ScriptedLLM([{"text": "hello there"}])
    pipeline = embedded_pipeline(llm=llm, store=f"sqlite:{path}")
    try:
        result = await pipeline.execute({"Instruction": "hi"}, Caller(org="a", user="b"))
    finally:
        assert isinstance(pipeline.ports.store, SQLiteStore)
        pipeline.ports.store.close()

    assert result.successful, result.errors
    response = result.result
    assert response is not None
    assert response.kind is ResponseKind.FINAL
    assert response.primary_output_text == "hello there"
    assert response.mode_display_name == "General"
    assert response.session_id
    assert response.turn_id
    assert llm.remaining == 0
    assert "hi" in [m.content for m in llm.requests[0].messages]
    with SQLiteStore(path) as reopened:
        tx = reopened.begin("a", "b")
        session = await tx.load_session(response.session_id)
        turn = await tx.load_turn(response.session_id, response.turn_id)
        transcript = await tx.load_transcript(response.session_id)
        stranger = await reopened.begin("a", "c").load_session(response.session_id)
    assert session is not None
    assert session.mode == "general"
    assert turn is not None
    assert [m.content for m in transcript][-1] == "hello there"
    assert stranger is None


@pytest.mark.parametrize(
    ("script", "message"),
    [
        ("[]", "the script has no replies"),
        ('{"replies": []}', "the script has no replies"),
        ('[{"tool_calls": [{"id": "  ", "name": "x"}]}]', "replies[0].tool_calls[0].id"),
    ],
)
def test_an_empty_script_or_a_blank_call_id_is_refused(script: str, message: str) -> None:
    with pytest.raises(ScriptError, match=re.escape(message)):
        ScriptedLLM.from_json(script)


CATALOG_TOML = re.compile(r"```toml\n(.*?)```", re.S)


def test_the_documented_catalog_example_loads() -> None:
    page = ROOT / "docs" / "CONFIGURATION.md"
    [example] = CATALOG_TOML.findall(page.read_text(encoding="utf-8"))

    catalog = ConfigCatalog.from_toml(example, source="docs/CONFIGURATION.md")

    assert asyncio.run(catalog.get_mode("general")) is not None


MEMBERS = """
[[modes]]
name = "general"
display_name = "General"
server_tools = {modes}
[[server_tools]]
name = "Math"
is_container = true
function_names = {names}
executes_on = "server"
[[server_tools]]
name = "Add"
member_of = "{container}"
executes_on = "server"
[[agents]]
id = "a"
name = "A"
[[conversations]]
id = "c"
"""


@pytest.mark.decision("D44")
@pytest.mark.parametrize(
    ("modes", "names", "container", "message"),
    [
        ('["Math", "Add"]', '["Add"]', "Mth", "not a container of the same set"),
        ('["Math", "Add"]', '["Add", "Sub"]', "Math", "not its members"),
        ('["Math", "Add"]', '["Sub"]', "Math", "is not in the FunctionNames"),
        ('["Add"]', '["Add"]', "Math", "mode 'general'"),
        ('["Math"]', '["Add"]', "Math", "mode 'general'"),
    ],
    ids=[
        "unknown-container",
        "unknown-function",
        "member-not-named",
        "member-without-container",
        "container-without-members",
    ],
)
def test_containers_and_members_must_agree(
    modes: str, names: str, container: str, message: str
) -> None:
    config = MEMBERS.format(modes=modes, names=names, container=container)

    with pytest.raises(CatalogError, match=re.escape(message)):
        ConfigCatalog.from_toml(config)
