"""A bounded fuzz of ``Pipeline.execute`` with recording and redaction on (D240-D242).

Mutated valid requests of all three kinds (tests/kits/fuzz_kit.py), on the memory store
and on a SQLite file: whatever the input, ``execute`` returns, its result
serializes, a refused request stores nothing and the turn's recording serializes.
``make fuzz`` runs 100,000 of the same mutations (tests/kits/fuzz_run.py); the cases
below the fuzz are known hard inputs (deep JSON, lone surrogates, invalid UTF-8, NUL,
many unknown keys, deep Python data), each checked the same way.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from fuzz_kit import (
    CALLER,
    INVARIANTS,
    KINDS,
    SECRET_KEYS,
    STORE_KINDS,
    Base,
    Case,
    Deep,
    FuzzWorld,
    Outcome,
    Tally,
    make_case,
)
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from aptix_pipeline.contracts import (
    AgentExecuteResponse,
    ErrorCode,
    InvokeError,
    InvokeResult,
)
from aptix_pipeline.engine import Pipeline

pytestmark = pytest.mark.decision("D240")

EXAMPLES = 1_500
"""Fuzzed requests per store kind in ``make test`` (``make fuzz`` runs 100,000)."""


@pytest.fixture(params=STORE_KINDS)
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[FuzzWorld, Any]]:
    """A started ``FuzzWorld`` on each store kind, with the event loop that runs it."""
    loop = asyncio.new_event_loop()
    fuzz_world = FuzzWorld(request.param, tmp_path)
    try:
        loop.run_until_complete(fuzz_world.start())
        yield fuzz_world, loop
        loop.run_until_complete(fuzz_world.close())
    finally:
        loop.close()


def _check(world: tuple[FuzzWorld, Any], case: Case) -> Outcome:
    fuzz_world, loop = world
    outcome: Outcome = loop.run_until_complete(fuzz_world.check(case))
    return outcome


# Any text at all, lone surrogates and NUL included, for the mutations to plant.
_ANY_TEXT = st.one_of(
    st.none(), st.text(st.characters(exclude_categories=()), min_size=1, max_size=8)
)


@pytest.mark.decision("D241", "D242")
def test_fuzzed_requests_keep_the_invariants(world: tuple[FuzzWorld, Any]) -> None:
    tally = Tally()
    fuzz_world, _ = world

    @seed(STORE_KINDS.index(fuzz_world.kind))  # the same requests every run; others per store
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(kind=st.sampled_from(KINDS), rng=st.randoms(use_true_random=False), text=_ANY_TEXT)
    def one(kind: str, rng: random.Random, text: str | None) -> None:
        _, base = fuzz_world.ready
        case = make_case(kind, base, rng, huge=20_000, extra_text=text)
        tally.add(case, _check(world, case))

    one()

    print(tally.report())  # shown when the test fails: every failure class, with an example
    assert tally.bad == 0, "see the counts and failure classes printed above"
    for kind in KINDS:  # the fuzz reached both outcomes of every kind
        assert tally.by_kind[kind]["successful"] > 0, tally.report()
        assert tally.by_kind[kind]["refused"] > 0, tally.report()


# --- known hard inputs, each on both stores ------------------------------------------------


def _continuation(result_json: Any) -> dict[str, Any]:
    return {
        "SessionId": "session-2",
        "TurnId": "turn-2",
        "ToolResults": [
            {"ToolCallId": "call-1", "ExecutionMs": 1, "ResultJson": result_json},
            {"ToolCallId": "call-2", "ExecutionMs": 1, "ResultJson": "{}"},
        ],
    }


def _nested(depth: int) -> Any:
    return Deep(depth, "object").value()


KNOWN: dict[str, tuple[str, Any]] = {
    # JSON nested 400 deep, redacted in the recording
    "deep-json-text-in-instruction": ("initial", {"Instruction": Deep(400, "list").text()}),
    "deep-json-text-in-result-json": ("continuation", _continuation(Deep(400, "object").text())),
    "deep-json-request-text": (
        "initial",
        '{"Instruction": "hi", "X": ' + Deep(400, "list").text() + "}",
    ),
    # a key that cannot be encoded
    "lone-surrogate-key": ("initial", {"\ud800": 1, "Instruction": "hi"}),
    "lone-surrogate-key-in-json-text": ("initial", '{"\\ud800": 1, "Instruction": "hi"}'),
    "lone-surrogate-in-instruction": ("initial", {"Instruction": "hi \udc80"}),
    "lone-surrogate-in-result-json": ("continuation", _continuation('{"text": "\ud800"}')),
    "escaped-lone-surrogate-in-bytes": ("initial", b'{"Instruction": "hi", "X": "\\ud800"}'),
    "lone-surrogate-in-workspace-hints": (
        "initial",
        {"Instruction": "hi", "WorkspaceHints": {"WorkspaceId": "\ud800"}},
    ),
    "invalid-utf8-bytes": ("initial", b'{"Instruction": "\xed\xa0\x80", "\xff": 1}'),
    # NUL and other edge Unicode
    "nul-in-solution-context": ("initial", {"Instruction": "hi", "SolutionContextText": "a\x00b"}),
    "nul-in-result-json": ("continuation", _continuation('{"k": "\\u0000"}')),
    # many unknown keys (tests/contracts/test_wire_limits.py checks the answer is bounded; here: it
    # serializes)
    "many-unknown-keys": ("initial", {"Instruction": "hi", **{f"k{n}": n for n in range(5_000)}}),
    # a Python dict nested 1,000 deep in an enum field
    "deep-dict-in-enum-field": (
        "initial",
        {
            "Instruction": "hi",
            "RagScope": [{"Key": "k", "Operator": _nested(1_000), "Values": ["v"]}],
        },
    ),
    # Python-only values a host may hand over
    "bytes-value": ("initial", {"Instruction": "hi", "Extra": b"\xff"}),
    "huge-int-value": ("initial", {"Instruction": "hi", "Extra": 10**5000}),
    "nan-value": ("initial", {"Instruction": "hi", "Stream": math.nan}),
}
"""Inputs that are hard to keep the invariants on, by name: (kind, request)."""


@pytest.mark.decision("D241")
@pytest.mark.parametrize("name", list(KNOWN))
def test_known_hard_inputs_keep_the_invariants(world: tuple[FuzzWorld, Any], name: str) -> None:
    kind, request = KNOWN[name]
    encoding = (
        "text" if isinstance(request, str) else "bytes" if isinstance(request, bytes) else "dict"
    )
    case = Case(kind, encoding, request, CALLER, [name])

    outcome = _check(world, case)

    assert outcome.broken is None, f"{outcome.broken}: {outcome.error} at {outcome.where}"
    assert outcome.recorded


@pytest.mark.decision("D401")
@pytest.mark.parametrize("key", SECRET_KEYS)
@pytest.mark.parametrize("kind", ["initial", "continuation"])
def test_a_keyed_turns_redacted_recording_holds_no_key(
    world: tuple[FuzzWorld, Any], key: str, kind: str
) -> None:
    fuzz_world, _ = world
    _, base = fuzz_world.ready
    request = make_case(kind, base, random.Random(key), mutations=0).request
    case = Case(kind, "text", request, CALLER, ["secret-key"], key)

    outcome = _check(world, case)

    assert outcome.broken is None, f"{outcome.broken}: {outcome.error} at {outcome.where}"
    assert outcome.recorded


# --- the harness itself sees each broken invariant --------------------------------------------


def _refusal(message: str = "refused") -> InvokeResult[AgentExecuteResponse]:
    # model_construct: InvokeError escapes lone surrogates when validated (D141), and the
    # harness must still be shown an error that cannot be encoded
    error = InvokeError.model_construct(code=ErrorCode.INVALID_REQUEST, message=message)
    return InvokeResult[AgentExecuteResponse].failure([error])


def _case() -> Case:
    return Case("initial", "dict", {"Instruction": "hi"}, CALLER)


@pytest.mark.decision("D240")
def test_the_checks_see_a_crash_an_unserializable_result_and_a_stored_refusal(
    world: tuple[FuzzWorld, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    fuzz_world, _ = world

    async def crash(*args: Any, **kwargs: Any) -> InvokeResult[AgentExecuteResponse]:
        raise RecursionError("deep")

    async def unencodable(*args: Any, **kwargs: Any) -> InvokeResult[AgentExecuteResponse]:
        return _refusal("field \ud800")

    async def stores_and_refuses(*args: Any, **kwargs: Any) -> InvokeResult[AgentExecuteResponse]:
        await real_execute({"Instruction": "stored"}, CALLER)
        return _refusal()

    seen: list[str | None] = []
    for fake in (crash, unencodable, stores_and_refuses):
        pipeline, _ = fuzz_world.ready  # a crash or a stored change makes a new one
        real_execute = partial(Pipeline.execute, pipeline)
        monkeypatch.setattr(pipeline, "execute", fake)
        seen.append(_check(world, _case()).broken)

    assert seen == ["crash", "unserializable", "stored_by_refused"]
    assert set(seen) <= set(INVARIANTS)


@pytest.mark.decision("D401")
def test_the_checks_see_a_recording_that_keeps_a_clients_key(
    world: tuple[FuzzWorld, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from dataclasses import replace

    from aptix_pipeline import TurnRecording

    monkeypatch.setattr(TurnRecording, "redact", lambda self: replace(self, redacted=True))
    case = Case("initial", "dict", {"Instruction": "hi"}, CALLER, [], SECRET_KEYS[1])

    outcome = _check(world, case)

    assert (outcome.broken, outcome.error) == ("recording_holds_key", SECRET_KEYS[1])
    assert "recording_holds_key" in INVARIANTS


@pytest.mark.decision("D242")
def test_a_seed_makes_the_same_case_again() -> None:
    base = Base("session-1", "turn-1", "session-2", "turn-2", ("call-1", "call-2"))
    first = [make_case(k, base, random.Random(f"7:{n}")).describe() for n, k in enumerate(KINDS)]
    again = [make_case(k, base, random.Random(f"7:{n}")).describe() for n, k in enumerate(KINDS)]

    assert first == again


HOSTILE_FAULTS = ("rule_raises", "rule_megabyte", "rule_exits", "hook_raises", "hook_junk")


@pytest.mark.decision("D398", "D399")
@pytest.mark.parametrize("hostile", [*HOSTILE_FAULTS, "hook_exits", "listener_exits"])
def test_hostile_host_code_is_told_politely(world: tuple[FuzzWorld, Any], hostile: str) -> None:
    case = Case("initial", "dict", {"Instruction": "hi"}, CALLER, [], None, hostile)

    outcome = _check(world, case)

    assert outcome.broken is None, outcome
    assert outcome.successful is (hostile == "listener_exits")


@pytest.mark.decision("D398")
def test_the_checks_see_host_code_told_whole(world: tuple[FuzzWorld, Any]) -> None:
    from dataclasses import replace

    fuzz_world, _ = world
    pipeline, _ = fuzz_world.ready
    pipeline.options = replace(pipeline.options, error_detail="full")  # the whole message
    case = Case("initial", "dict", {"Instruction": "hi"}, CALLER, [], None, "rule_raises")

    outcome = _check(world, case)

    assert (outcome.broken, outcome.where) == ("host_leak", "rule_raises")
    assert "host_leak" in INVARIANTS
