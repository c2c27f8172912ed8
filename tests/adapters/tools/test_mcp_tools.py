"""MCP servers as server tools (docs/MCP.md), against real servers written with the
official SDK (``tests/kits/mcp_demo_server.py``) over stdio and streamable HTTP."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from engine_kit import CALLER, call, calls, continuation, follow_on, ok, start, text
from mcp_kit import children_of, http_demo, stdio_demo
from span_kit import Recorded, attributes_of

from aptix_pipeline import embedded_pipeline
from aptix_pipeline.adapters.config import ConfigError
from aptix_pipeline.adapters.config.service import parse_service_config
from aptix_pipeline.adapters.files import LocalFileStore
from aptix_pipeline.adapters.models.scripted import ScriptedLLM
from aptix_pipeline.adapters.system import SystemClock
from aptix_pipeline.adapters.tools import McpPool, StdioServer
from aptix_pipeline.engine.replay import RecordingOptions, replay


@pytest.fixture(scope="module")
def pool() -> Iterator[McpPool]:
    """The stdio demo server, started once for the module."""
    with McpPool([stdio_demo()]).start() as started:
        yield started


def pipeline_on(pool: McpPool, replies: list[Any], **more: Any) -> Any:
    return embedded_pipeline(llm=ScriptedLLM(replies), mcp=pool, **more)


def result_of(response: Any, index: int = 0) -> Any:
    results = response.tool_results or []
    return results[index]


@pytest.mark.decision("D490")
def test_mcp_tools_join_the_catalog_with_their_json_schemas(pool: McpPool) -> None:
    by_name = {tool.name: tool for tool in pool.definitions()}
    assert {"remember", "recall", "picture", "ask_name"} <= set(by_name)
    assert by_name["remember"].executes_on == "server"
    assert by_name["remember"].parameters["required"] == ["key", "value"]
    assert pool.offered_in()["general"][0] == "remember"


@pytest.mark.decision("D523")
def test_an_mcp_tool_marked_read_only_is_naturally_idempotent(pool: McpPool) -> None:
    by_name = {tool.name: tool for tool in pool.definitions()}

    assert by_name["recall"].idempotent == "naturally"
    assert by_name["remember"].idempotent is None


@pytest.mark.decision("D490")
def test_an_allow_list_keeps_only_the_named_tools_and_names_a_missing_one() -> None:
    with McpPool([stdio_demo(tools=("recall",))]).start() as kept:
        assert [tool.name for tool in kept.definitions()] == ["recall"]
    with pytest.raises(ValueError, match=r"'demo'.*\['nope'\]"):
        McpPool([stdio_demo(tools=("nope",))]).start()


@pytest.mark.decision("D490")
def test_two_servers_offering_one_tool_name_are_refused_naming_both() -> None:
    with pytest.raises(ValueError, match=r"'remember' is offered by both .*'one'.*'two'"):
        McpPool([stdio_demo("one"), stdio_demo("two")]).start()


@pytest.mark.decision("D490")
def test_a_clash_with_a_host_tool_is_refused_naming_both(pool: McpPool) -> None:
    async def mine(arguments: dict[str, Any], invocation: Any) -> str:
        return "{}"

    with pytest.raises(ConfigError, match=r"MCP tool 'recall' of server 'demo' .*host tool"):
        embedded_pipeline(llm=ScriptedLLM([]), mcp=pool, tools={"recall": mine})


@pytest.mark.decision("D491")
def test_a_server_that_cannot_start_is_a_config_error_naming_it(tmp_path: Path) -> None:
    broken = StdioServer(name="gone", command=str(tmp_path / "no-such-command"))
    with pytest.raises(ConfigError, match=r"MCP server 'gone' \(stdio: .*no-such-command\)"):
        embedded_pipeline(llm=ScriptedLLM([]), mcp=[broken])


@pytest.mark.decision("D492")
async def test_a_stateful_server_keeps_its_state_across_calls_and_turns(pool: McpPool) -> None:
    pipeline = pipeline_on(
        pool,
        [
            calls(call("c1", "remember", {"key": "colour", "value": "teal"})),
            text("kept"),
            calls(call("c2", "recall", {"key": "colour"})),
            text("recalled"),
            calls(call("c3", "recall", {"key": "colour"})),
            text("other session"),
        ],
    )
    _, first = await start(pipeline, "remember teal")
    report = await pipeline.run(follow_on(first, "what colour?"), CALLER)
    second = ok(report.result)
    assert json.loads(result_of(second).result_json) == {"key": "colour", "value": "teal"}
    _, other = await start(pipeline, "a new session")  # its own MCP session: no notes
    assert json.loads(result_of(other).result_json) == {"key": "colour", "value": None}


@pytest.mark.decision("D493")
async def test_results_map_to_json_files_and_tool_errors(pool: McpPool, tmp_path: Path) -> None:
    files = LocalFileStore(
        tmp_path, url_base="https://files.example", signing_key=b"k" * 32, clock=SystemClock()
    )
    pipeline = pipeline_on(
        pool,
        [
            calls(
                call("p", "picture"),
                call("r", "report", {"title": "Q3"}),
                call("e", "refuse", {"reason": "not today"}),
            ),
            text("done"),
        ],
        files=files,
    )
    _, response = await start(pipeline)
    picture, report, refused = response.tool_results or []
    assert picture.result_json == '"a red pixel"'
    assert json.loads(report.result_json or "") == {"title": "Q3", "lines": 1}
    assert refused.result_json is None
    assert "not today" in (refused.error_message or "")
    kept = {(f.name, f.mime_type) for f in response.files or []}
    assert kept == {("picture-1.png", "image/png"), ("report.md", "text/markdown")}


@pytest.mark.decision("D494")
async def test_a_slow_server_hits_the_deadline_and_the_session_goes_on(pool: McpPool) -> None:
    from aptix_pipeline.steps import PipelineOptions

    pipeline = pipeline_on(
        pool,
        [
            calls(call("a", "whoami")),
            calls(call("s", "slow", {"seconds": 60})),
            calls(call("b", "whoami")),
            text("ok"),
        ],
        options=PipelineOptions(server_tool_timeout_seconds=3),
    )
    _, response = await start(pipeline)
    before, slow, after = response.tool_results or []
    assert "did not answer within 3 s" in (slow.error_message or "")
    assert after.error_message is None  # the cancelled request left the session usable
    assert after.result_json == before.result_json  # the same server process


@pytest.mark.decision("D494")
async def test_a_server_that_crashes_mid_call_fails_it_clearly_then_reconnects(
    pool: McpPool,
) -> None:
    pipeline = pipeline_on(
        pool,
        [
            calls(call("a", "whoami")),
            calls(call("b", "crash")),
            calls(call("c", "whoami")),
            text("ok"),
        ],
    )
    _, response = await start(pipeline)
    before, crashed, after = response.tool_results or []
    assert "the connection dropped during the call of 'crash'" in (crashed.error_message or "")
    assert after.error_message is None
    assert after.result_json != before.result_json  # another process: it reconnected


@pytest.mark.decision("D495")
async def test_elicitation_pauses_the_turn_and_the_answer_resumes_the_call(
    pool: McpPool,
) -> None:
    llm = ScriptedLLM([calls(call("n", "ask_name")), text("greeted")])
    pipeline = embedded_pipeline(llm=llm, mcp=pool)
    _, paused = await start(pipeline, "greet me")
    [asked] = paused.tool_calls or []
    assert (asked.tool_call_id, asked.name) == ("n", "mcp_elicitation")
    arguments = json.loads(asked.arguments_json)
    assert (arguments["server"], arguments["tool"]) == ("demo", "ask_name")
    assert arguments["message"] == "What is your name?"
    assert arguments["requested_schema"]["required"] == ["name"]
    answer = {"action": "accept", "content": {"name": "Ada"}}
    report = await pipeline.run(
        continuation(
            paused, {"ToolCallId": "n", "ExecutionMs": 5, "ResultJson": json.dumps(answer)}
        ),
        CALLER,
    )
    final = ok(report.result)
    assert final.primary_output_text == "greeted"
    assert json.loads(result_of(final).result_json) == {"result": "hello Ada"}
    [request] = llm.requests[-1:]
    tool_messages = [m for m in request.messages if m.role.value == "tool"]
    assert [(m.tool_call_id, m.content) for m in tool_messages] == [
        ("n", '{"result": "hello Ada"}')
    ]


@pytest.mark.decision("D495")
async def test_a_declined_or_failed_answer_reaches_the_server_as_such(pool: McpPool) -> None:
    pipeline = pipeline_on(pool, [calls(call("n", "ask_name")), text("ok")] * 2)
    _, paused = await start(pipeline)
    declined = '{"action": "decline"}'
    result = await pipeline.run(
        continuation(paused, {"ToolCallId": "n", "ExecutionMs": 1, "ResultJson": declined}),
        CALLER,
    )
    assert json.loads(result_of(ok(result.result)).result_json) == {"result": "no name (decline)"}
    _, paused = await start(pipeline)
    failed = {"ToolCallId": "n", "ExecutionMs": 1, "ErrorMessage": "no UI here"}
    result = await pipeline.run(continuation(paused, failed), CALLER)
    assert json.loads(result_of(ok(result.result)).result_json) == {"result": "no name (cancel)"}


@pytest.mark.decision("D495")
async def test_an_answer_nobody_waits_for_fails_the_call_clearly() -> None:
    with McpPool([stdio_demo(elicitation_timeout_seconds=0.2)]).start() as short:
        pipeline = pipeline_on(short, [calls(call("n", "ask_name")), text("ok")])
        _, paused = await start(pipeline)
        import asyncio

        await asyncio.sleep(0.5)  # past the timeout: the server was told "cancel"
        answer = '{"action": "accept", "content": {"name": "Ada"}}'
        result = await pipeline.run(
            continuation(paused, {"ToolCallId": "n", "ExecutionMs": 1, "ResultJson": answer}),
            CALLER,
        )
        late = result_of(ok(result.result))
        assert "no call of MCP tool 'ask_name' waits for this answer" in late.error_message


@pytest.mark.decision("D496")
async def test_an_mcp_call_is_recorded_and_replays_without_the_server() -> None:
    with McpPool([stdio_demo()]).start() as own:
        pipeline = pipeline_on(
            own,
            [calls(call("r", "recall", {"key": "k"}), call("n", "ask_name")), text("x")],
            recording=RecordingOptions(),
        )
        report, paused = await start(pipeline)
        answer = '{"action": "accept", "content": {"name": "Ada"}}'
        resumed = await pipeline.run(
            continuation(paused, {"ToolCallId": "n", "ExecutionMs": 1, "ResultJson": answer}),
            CALLER,
        )
    for recorded in (report.recording, resumed.recording):
        assert recorded is not None
        outcome = await replay(recorded)  # the pool is closed: the recording answers
        assert outcome.ok, outcome.describe()


@pytest.mark.decision("D497")
async def test_the_execute_tool_span_carries_the_mcp_attributes(pool: McpPool) -> None:
    recorded = Recorded()
    pipeline = pipeline_on(
        pool, [calls(call("w", "whoami")), text("ok")], telemetry=recorded.telemetry()
    )
    await start(pipeline)
    [span] = [s for s in recorded.spans if s.name == "execute_tool whoami"]
    attributes = attributes_of(span)
    assert attributes["mcp.method.name"] == "tools/call"
    assert attributes["network.transport"] == "pipe"
    assert attributes["aptix.mcp.server"] == "demo"
    assert attributes["mcp.protocol.version"]


@pytest.mark.decision("D498")
async def test_streamable_http_with_headers_from_the_environment(tmp_path: Path) -> None:
    with http_demo({"DEMO_TOKEN": "s3cret"}) as url:
        data = {
            "mcp_servers": [
                {
                    "name": "web",
                    "url": url,
                    "headers_env": {"Authorization": "WEB_AUTH"},
                    "modes": ["general"],
                }
            ]
        }
        with pytest.raises(
            ConfigError, match=r"mcp_servers\[0\] \(web\)\.headers_env\.Authorization"
        ):
            parse_service_config(data, env={})
        with pytest.raises(ConfigError, match="MCP server 'web'"):
            parse_service_config(data, env={"WEB_AUTH": "Bearer wrong"})
        config = parse_service_config(data, env={"WEB_AUTH": "Bearer s3cret"})
        try:
            pipeline = embedded_pipeline(
                llm=ScriptedLLM(
                    [
                        calls(call("a", "remember", {"key": "k", "value": "v"})),
                        calls(call("b", "recall", {"key": "k"})),
                        text("ok"),
                    ]
                ),
                catalog=config.catalog,
                mcp=config.mcp,
            )
            _, response = await start(pipeline)
            assert json.loads(result_of(response, 1).result_json) == {"key": "k", "value": "v"}
        finally:
            config.close()


@pytest.mark.decision("D499")
def test_closing_the_pool_stops_the_servers_and_its_thread() -> None:
    own = McpPool([stdio_demo()]).start()
    pipeline = pipeline_on(own, [calls(call("w", "whoami")), text("ok")])
    import asyncio

    _, response = asyncio.run(start(pipeline))
    server = json.loads(result_of(response).result_json)["result"]
    assert server in children_of(os.getpid())  # the server runs while the pool is open
    own.close()
    assert server not in children_of(os.getpid())
    assert not own._thread.is_alive()
    own.close()  # idempotent
