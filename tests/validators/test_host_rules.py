"""A host's own guard rules: ids under ``host/``, codes under ``host.``, in the step's guard.

A host rule runs once its step's AGN-036 PRE rules have passed; its id shows
where the DDR rules' ids show — the error (``RuleId``), the state trace's guard
record, the step's span, the diagram's label — and its code never reads as one of
the engine's. A rule that raises faults the turn under its own id and code. Ids
and codes outside the host's namespaces, and an id used twice, are refused.
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

import httpx
import pytest
from builders import context_before
from engine_kit import CALLER, NOTHING_STORED, make_pipeline, ok, stored, text
from jsonschema import Draft202012Validator
from repo import ROOT
from server_thread import server_thread
from span_kit import Recorded, attributes_of, events_named

from aptix_pipeline import (
    ContextType,
    ErrorCode,
    HostRule,
    HostRules,
    InvokeError,
    InvokeResult,
    MemoryStore,
    Pipeline,
    PipelineContext,
    PipelineStep,
    Runtime,
    ScriptedLLM,
    StepFaultError,
    Telemetry,
    TurnScope,
    all_rules,
    diagram_text,
    embedded_pipeline,
)
from aptix_pipeline.adapters.config.service import ApiKey
from aptix_pipeline.adapters.http.app import ApiKeyAuthenticator, create_app
from aptix_pipeline.engine import CheckRan, CheckRecord, TurnEvent
from aptix_pipeline.engine.machine import TurnRun, host_guards, pre
from aptix_pipeline.validators import Phase, step_rule_ids
from aptix_pipeline.validators.rules import rule

SCHEMA = ROOT / "docs" / "schemas" / "invoke-result.schema.json"
CLOSED = "the agent does not work at weekends"


def no_weekend(ctx: PipelineContext) -> bool | str:
    """Holds unless the instruction says it is the weekend."""
    return "weekend" not in (ctx.envelope.instructions or "") or "it is Saturday"


WEEKEND = HostRule(
    id="host/no-weekend",
    step=PipelineStep.REASONER,
    message=CLOSED,
    code="host.closed",
    check=no_weekend,
)


def ruled(
    *rules: HostRule,
    store: MemoryStore | None = None,
    telemetry: Telemetry | None = None,
    runtime: Runtime = "compiled",
) -> Pipeline:
    """A pipeline on the memory store (deterministic clock and ids) with the host's ``rules``."""
    base, _ = make_pipeline(store or MemoryStore(), [text("Hello.")])
    return Pipeline(
        base.ports,
        base.options,
        rules=rules,
        telemetry=telemetry or Telemetry.off(),
        runtime=runtime,
    )


def guard_of(checks: tuple[CheckRecord, ...], step: str) -> CheckRecord:
    [found] = [c for c in checks if c.step == step and c.phase == "PRE"]
    return found


# --- in a turn -------------------------------------------------------------------------------


@pytest.mark.decision("D290")
@pytest.mark.parametrize("runtime", ["compiled", "statechart"])
async def test_a_host_rule_that_holds_lets_the_turn_through_and_shows_in_the_guard_record(
    runtime: Runtime,
) -> None:
    pipeline = ruled(WEEKEND, runtime=runtime)

    report = await pipeline.run({"Instruction": "Hi"}, CALLER)

    ok(report.result)
    guard = guard_of(report.checks, "reasoner")
    assert guard.rule_ids == (*step_rule_ids(PipelineStep.REASONER, Phase.PRE), WEEKEND.id)
    assert (guard.outcome, guard.failed) == ("passed", ())


@pytest.mark.decision("D290", "D291")
@pytest.mark.parametrize(
    ("verdict", "message"), [(False, CLOSED), ("it is Saturday", f"{CLOSED}: it is Saturday")]
)
async def test_a_broken_host_rule_faults_with_its_id_code_and_message(
    verdict: bool | str, message: str
) -> None:
    store = MemoryStore()
    rule_ = HostRule(
        id="host/no-weekend",
        step=PipelineStep.REASONER,
        message=CLOSED,
        code="host.closed",
        check=lambda ctx: verdict,
    )
    pipeline = ruled(rule_, store=store)

    report = await pipeline.run({"Instruction": "Hi"}, CALLER)

    [error] = report.result.errors
    assert (error.code, error.rule_id, error.message) == ("host.closed", rule_.id, message)
    assert report.faulted_step == "reasoner"
    assert report.trace is not None
    assert report.trace.error_codes == ("host.closed",)
    assert guard_of(report.checks, "reasoner").failed == (rule_.id,)
    assert await stored(store) == NOTHING_STORED


@pytest.mark.decision("D290")
async def test_host_rules_of_one_step_all_run_and_each_reports() -> None:
    always = HostRule(
        id="host/always-broken",
        step=PipelineStep.REASONER,
        message="never holds",
        code="host.never",
        check=lambda ctx: False,
    )
    pipeline = ruled(WEEKEND, always)

    report = await pipeline.run({"Instruction": "a weekend job"}, CALLER)

    assert [(e.rule_id, e.code) for e in report.result.errors] == [
        (WEEKEND.id, "host.closed"),
        (always.id, "host.never"),
    ]
    assert guard_of(report.checks, "reasoner").failed == (WEEKEND.id, always.id)


@pytest.mark.decision("D290")
async def test_a_raising_host_rule_faults_with_its_id_and_logs_the_traceback_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(ctx: PipelineContext) -> bool:
        raise LookupError(f"no calendar for {ctx.envelope.instructions}")

    rule_ = HostRule(
        id="host/calendar",
        step=PipelineStep.LLM_CLIENT,
        message=CLOSED,
        code="host.closed",
        check=broken,
    )
    pipeline = ruled(rule_)

    with caplog.at_level(logging.DEBUG, logger="aptix_pipeline"):
        report = await pipeline.run({"Instruction": "Meet on Friday"}, CALLER)

    [error] = report.result.errors
    assert (error.code, error.rule_id) == ("host.closed", "host/calendar")
    assert error.code is not ErrorCode.INTERNAL
    assert error.message == f"{CLOSED}: the rule raised LookupError: no calendar for Meet on Friday"
    assert report.faulted_step == "llm_client"
    assert guard_of(report.checks, "llm_client").failed == ("host/calendar",)
    [logged] = [r for r in caplog.records if "Traceback" in r.getMessage()]
    assert "in broken" in logged.getMessage()
    assert "LookupError" in logged.getMessage()
    assert "Meet on Friday" not in caplog.text  # its message: only with content capture


async def test_a_host_rule_answering_neither_a_bool_nor_a_str_faults_with_its_id() -> None:
    rule_ = HostRule(
        id="host/sloppy",
        step=PipelineStep.REASONER,
        message="answers plainly",
        code="host.sloppy",
        check=lambda ctx: None,  # type: ignore[arg-type,return-value]
    )

    report = await ruled(rule_).run({"Instruction": "Hi"}, CALLER)

    [error] = report.result.errors
    assert (error.code, error.rule_id) == ("host.sloppy", "host/sloppy")
    assert error.message == "answers plainly: the rule returned NoneType, not True, False or a str"


@pytest.mark.decision("D290")
async def test_host_rules_run_only_once_the_steps_pre_rules_passed() -> None:
    asked: list[str] = []

    def look(ctx: PipelineContext) -> bool:
        asked.append("asked")
        return True

    rule_ = HostRule(
        id="host/look", step=PipelineStep.REASONER, message="looks", code="host.look", check=look
    )
    base, _ = make_pipeline(MemoryStore(), [])
    ctx = context_before(PipelineStep.REASONER, ContextType.INITIAL)
    ctx.prompt_provider_ready = False  # AGN-036/4.8/PRE/prompt-provider-ready fails
    scope = TurnScope(ports=base.ports, options=base.options, caller=CALLER, raw_request={})
    scope.context = ctx
    events: list[TurnEvent] = []
    run = TurnRun(scope=scope, emit=events.append, host_guards=host_guards(HostRules([rule_])))

    with pytest.raises(StepFaultError) as refused:
        pre(PipelineStep.REASONER)(run)

    assert asked == []
    assert refused.value.errors[0].rule_id == "AGN-036/4.8/PRE/prompt-provider-ready"
    assert all(not (e.rule_id or "").startswith("host/") for e in refused.value.errors)
    [check] = [e.check for e in events if isinstance(e, CheckRan)]
    assert check.rule_ids == step_rule_ids(PipelineStep.REASONER, Phase.PRE)


@pytest.mark.decision("D290")
async def test_a_host_rule_shows_on_its_steps_span_as_the_ddr_rules_do() -> None:
    recorded = Recorded()
    pipeline = ruled(WEEKEND, telemetry=recorded.telemetry())

    await pipeline.run({"Instruction": "a weekend job"}, CALLER)

    [step] = [s for s in recorded.turn().steps if s.name == "step reasoner"]
    attributes = attributes_of(step)
    assert attributes["aptix.guard.rule_ids"][-1] == WEEKEND.id
    assert attributes["aptix.guard.failed_rule_ids"] == [WEEKEND.id]
    assert attributes["aptix.guard.outcome"] == "failed"
    assert attributes["error.type"] == "host.closed"
    [failed] = events_named(step, "aptix.rule.failed")
    assert failed == {
        "aptix.rule.id": WEEKEND.id,
        "aptix.step.name": "reasoner",
        "aptix.check.phase": "PRE",
    }
    assert attributes_of(recorded.turn().root)["aptix.rule.failed_ids"] == [WEEKEND.id]


async def test_embedded_pipeline_takes_host_rules() -> None:
    pipeline = embedded_pipeline(llm=ScriptedLLM([text("Hello.")]), rules=[WEEKEND])

    result = await pipeline.execute({"Instruction": "a weekend job"}, CALLER)

    assert result.rule_ids == (WEEKEND.id,)
    assert pipeline.rules.ids(PipelineStep.REASONER) == (WEEKEND.id,)


# --- the diagram, the tables and the wire ---------------------------------------------------------


@pytest.mark.decision("D290")
def test_a_host_rule_joins_its_steps_label_and_tooltip_in_the_diagram() -> None:
    mermaid = diagram_text("mermaid", rules=[WEEKEND])
    dot = diagram_text("dot", rules=[WEEKEND])

    assert "prompt_ready --> reasoning : reasoner PRE §4.8 + host/no-weekend\n" in mermaid
    assert 'label="reasoner PRE §4.8 + host/no-weekend"' in dot
    assert "host/no-weekend\\nPOST: N/A" in dot  # last of the tooltip's PRE line
    assert "host/" not in diagram_text("mermaid")


@pytest.mark.decision("D290")
def test_the_engines_rule_table_stays_the_ddr_rules_and_a_host_lists_its_own() -> None:
    pipeline = ruled(WEEKEND)

    table = pipeline.rules.table()

    assert not [rule_id for rule_id in all_rules() if rule_id.startswith("host")]
    assert table.splitlines()[2] == (
        f"| `host/no-weekend` | `reasoner` | {CLOSED} | `host.closed` |"
    )


@pytest.mark.decision("D291")
def test_a_host_code_is_valid_on_the_wire_and_no_engine_code_is_one() -> None:
    schema = Draft202012Validator(json.loads(SCHEMA.read_text(encoding="utf-8")))
    failed = InvokeResult[Any].failure(
        [InvokeError(code="host.closed", message=CLOSED, rule_id=WEEKEND.id)]
    )

    wire = failed.to_wire()

    assert schema.is_valid(wire)
    assert wire["Errors"][0]["Code"] == "host.closed"
    assert not schema.is_valid({**wire, "Errors": [{"Code": "closed", "Message": "m"}]})
    assert not [code for code in ErrorCode if code.value.startswith("host.")]


# --- refusals ------------------------------------------------------------------------------------


@pytest.mark.decision("D290")
@pytest.mark.parametrize(
    "rule_id",
    [
        "AGN-036/4.8/PRE/no-weekend",
        "DESIGN/no-weekend",
        "host",
        "host/",
        "Host/no-weekend",
        "host/No-Weekend",
        "host/no weekend",
        "host//x",
        "hosts/x",
        "host/x\n",
    ],
)
def test_a_host_rule_id_outside_the_host_namespace_is_refused(rule_id: str) -> None:
    with pytest.raises(ValueError, match="outside the host namespace"):
        HostRule(
            id=rule_id, step=PipelineStep.REASONER, message=CLOSED, code="host.x", check=no_weekend
        )


@pytest.mark.decision("D291")
@pytest.mark.parametrize(
    "code", ["internal", "pipeline_rule_failed", "host", "host.", "HOST.x", "host.a b", "host_x"]
)
def test_a_host_rule_code_outside_the_host_namespace_is_refused(code: str) -> None:
    with pytest.raises(ValueError, match=r"HostRule\.code of host/x"):
        HostRule(id="host/x", step=PipelineStep.REASONER, message=CLOSED, code=code, check=bool)


@pytest.mark.decision("D290")
def test_two_rules_with_one_id_are_refused() -> None:
    twin = HostRule(
        id=WEEKEND.id, step=PipelineStep.LLM_CLIENT, message="m", code="host.x", check=bool
    )
    base, _ = make_pipeline(MemoryStore(), [])

    with pytest.raises(ValueError, match="host/no-weekend is used by two rules"):
        Pipeline(base.ports, rules=[WEEKEND, twin])
    with pytest.raises(ValueError, match="host/no-weekend is given twice"):
        Pipeline(base.ports, rules=[WEEKEND, WEEKEND])


@pytest.mark.decision("D290")
def test_the_engines_rules_cannot_take_a_host_id() -> None:
    with pytest.raises(ValueError, match="namespace is the host's"):
        rule(
            "host/mine",
            "host",
            "an engine rule",
            ErrorCode.PIPELINE_RULE_FAILED,
            module="aptix_pipeline.validators.x",
        )


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"step": PipelineStep.REQUEST_HANDLER}, "request_handler has no guard"),
        ({"step": "the_reasoner"}, "is not a PipelineStep"),
        ({"message": ""}, "must be a one-line text"),
        ({"message": "two\nlines"}, "must be one line"),
    ],
    ids=["request_handler", "unknown step", "no message", "two lines"],
)
def test_a_host_rule_with_a_bad_field_is_refused_naming_it(
    changes: dict[str, Any], message: str
) -> None:
    fields: dict[str, Any] = {
        "id": "host/x",
        "step": PipelineStep.REASONER,
        "message": CLOSED,
        "code": "host.x",
        "check": no_weekend,
        **changes,
    }

    with pytest.raises(ValueError, match=message):
        HostRule(**fields)


def test_a_host_rule_whose_check_is_not_a_function_is_refused() -> None:
    with pytest.raises(TypeError, match=r"HostRule\.check of host/x"):
        HostRule(
            id="host/x",
            step=PipelineStep.REASONER,
            message=CLOSED,
            code="host.x",
            check="yes",  # type: ignore[arg-type]
        )


# --- over HTTP: the status a host rule's refusal answers ---------------------------------------


@pytest.mark.decision("D291")
@pytest.mark.parametrize(("status", "expected"), [(None, 500), (403, 403)], ids=["default", "403"])
def test_a_turn_a_host_rule_refused_answers_the_rules_http_status(
    status: int | None, expected: int
) -> None:
    given = {} if status is None else {"http_status": status}
    rule_ = HostRule(
        id="host/no-weekend",
        step=PipelineStep.REASONER,
        message=CLOSED,
        code="host.closed",
        check=no_weekend,
        **given,
    )
    pipeline = embedded_pipeline(llm=ScriptedLLM([text("Hello.")] * 2), rules=[rule_])
    keys = [ApiKey(org="acme", user="ana", sha256=hashlib.sha256(b"k").digest())]
    app = create_app(pipeline, authenticator=ApiKeyAuthenticator(keys))

    with server_thread(app) as port:
        url = f"http://127.0.0.1:{port}/v1/agent/execute"
        headers = {"Authorization": "Bearer k"}
        refused = httpx.post(url, json={"Instruction": "weekend plans"}, headers=headers)
        answered = httpx.post(url, json={"Instruction": "Hi"}, headers=headers)

    assert refused.status_code == expected
    assert refused.json()["Errors"][0]["Code"] == "host.closed"
    assert refused.json()["Errors"][0]["RuleId"] == "host/no-weekend"
    assert answered.status_code == 200


@pytest.mark.parametrize("status", [200, 302, 600, True, "403"], ids=str)
def test_a_host_rule_status_that_is_not_an_error_status_is_refused(status: Any) -> None:
    with pytest.raises(ValueError, match=r"HostRule.http_status of host/x: .* \(400-599\)"):
        HostRule(
            id="host/x",
            step=PipelineStep.REASONER,
            message="m",
            code="host.x",
            check=no_weekend,
            http_status=status,
        )


def test_one_host_code_answers_one_http_status() -> None:
    first = HostRule("host/a", PipelineStep.REASONER, "m", "host.closed", no_weekend, 403)
    second = HostRule("host/b", PipelineStep.LLM_CLIENT, "m", "host.closed", no_weekend, 422)

    given_twice = r"host error code host\.closed is given HTTP status 403 and 422"
    with pytest.raises(ValueError, match=given_twice):
        HostRules([first, second])
    assert HostRules([first]).http_statuses == {"host.closed": 403}
