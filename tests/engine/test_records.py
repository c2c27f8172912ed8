"""``quick_init`` (``engine/records.py``): a record made quicker is the same record (D444)."""

from __future__ import annotations

import dataclasses
import inspect
import pickle
from dataclasses import dataclass, field
from typing import Any

import pytest

from aptix_pipeline.engine import ModelCallFinished, TurnReport, TurnStarted
from aptix_pipeline.engine.records import quick_init
from aptix_pipeline.engine.trace import LLMCallRecord, StateTrace


@dataclass(frozen=True, slots=True)
class _Base:
    run_id: int


@quick_init
@dataclass(frozen=True, slots=True)
class _Quick(_Base):
    name: str
    tools: tuple[str, ...] = field(default=())
    attempts: int = 1


@dataclass(frozen=True, slots=True)
class _Plain(_Base):
    name: str
    tools: tuple[str, ...] = field(default=())
    attempts: int = 1


@pytest.mark.decision("D444")
def test_a_quick_record_takes_the_same_arguments_and_holds_the_same_values() -> None:
    assert str(inspect.signature(_Quick)) == str(inspect.signature(_Plain))
    cases: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
        ((1, "a"), {}),
        ((1, "a", ("t",)), {"attempts": 3}),
        ((), {"run_id": 2, "name": "b"}),
    ]
    for args, kwargs in cases:
        quick, plain = _Quick(*args, **kwargs), _Plain(*args, **kwargs)
        assert dataclasses.astuple(quick) == dataclasses.astuple(plain)
    assert repr(_Quick(1, "a")) == "_Quick(run_id=1, name='a', tools=(), attempts=1)"


@pytest.mark.decision("D444")
def test_a_quick_record_is_frozen_equal_hashed_replaced_and_pickled_as_before() -> None:
    record = _Quick(1, "a", ("t",))

    with pytest.raises(dataclasses.FrozenInstanceError):
        record.name = "b"  # type: ignore[misc]
    assert record == _Quick(1, "a", ("t",))
    assert hash(record) == hash(_Quick(1, "a", ("t",)))
    assert record != _Quick(1, "a")
    assert dataclasses.replace(record, attempts=2) == _Quick(1, "a", ("t",), 2)
    assert pickle.loads(pickle.dumps(record)) == record


@pytest.mark.decision("D444")
def test_a_quick_record_refuses_missing_and_unknown_arguments_as_a_dataclass_does() -> None:
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'name'"):
        _Quick(1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        _Quick(1, "a", colour="red")  # type: ignore[call-arg]


@pytest.mark.decision("D444")
def test_what_quick_init_cannot_reproduce_is_refused_naming_the_class() -> None:
    @dataclass(frozen=True)
    class NoSlots:
        a: int

    @dataclass(frozen=True, slots=True)
    class Factory:
        a: list[int] = field(default_factory=list)

    @dataclass(frozen=True, slots=True)
    class KeywordOnly:
        a: int = field(kw_only=True)

    @dataclass(frozen=True, slots=True)
    class Checked:
        a: int

        def __post_init__(self) -> None:
            return None

    @dataclass(slots=True)
    class Mutable:
        a: int

    for kind in (NoSlots, Factory, KeywordOnly, Checked, Mutable):
        with pytest.raises(TypeError, match=kind.__name__):
            quick_init(kind)


@pytest.mark.decision("D444")
@pytest.mark.parametrize(
    "kind", [TurnReport, StateTrace, LLMCallRecord, TurnStarted, ModelCallFinished]
)
def test_the_turns_records_are_made_quickly_and_stay_frozen(kind: type[Any]) -> None:
    init = vars(kind)["__init__"]
    assert init.__module__ == kind.__module__
    assert "_set0" in init.__code__.co_names
    assert vars(kind)["__dataclass_params__"].frozen
