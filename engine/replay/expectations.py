"""What an eval case expects of a candidate's turn, checked without a model judge.

An ``Expectations`` is read from one case's table of an expectations file
(``Expectations.parse``; the file itself is read by ``adapters/evals``) and checked
against what a turn did (``TurnFacts``): which tools its model called, with which
arguments; its final kind (AGN-033 §3.2: ``final``, ``client_tool_continuation``,
or ``error`` for a turn that did not succeed); its text; its tokens, cost and model
latency. Each failed expectation is one line naming it (``Expectations.check``).
The keys are in docs/EVALS.md "Expectations"; an unknown key is a ``ValueError``
naming the file, the case and the key (D622).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Final

__all__ = [
    "FINAL_KINDS",
    "ArgumentMatcher",
    "Expectations",
    "ToolCallSeen",
    "ToolExpectation",
    "TurnFacts",
]

FINAL_KINDS: Final = ("final", "client_tool_continuation", "error")
"""A turn's final kind: the response's ``Kind`` (AGN-033 §3.2), or ``error`` when the
turn was not ``Successful``."""

_KEYS: Final = frozenset(
    {
        "kind",
        "calls",
        "no_calls",
        "text_contains",
        "text_not_contains",
        "text_matches",
        "max_tokens",
        "max_cost",
        "max_latency_ms",
        "allow_divergence",
    }
)
_CALL_KEYS: Final = frozenset({"tool", "arguments"})
_MATCHER_KEYS: Final = frozenset({"path", "equals", "contains", "matches"})
_STEP = re.compile(r"\.([^.\[\]]+)|\[(\d+)\]")


class _Unset:
    def __repr__(self) -> str:
        return "<unset>"


_UNSET: Final = _Unset()


@dataclass(frozen=True, slots=True)
class ToolCallSeen:
    """A tool call a model made: its name and its arguments (JSON, or the text it sent
    when that is not JSON)."""

    name: str
    arguments: Any


@dataclass(frozen=True, slots=True)
class TurnFacts:
    """What a turn did, as expectations see it.

    ``tokens`` is ``None`` when a model call reported no usage; ``cost`` when a call
    has no price; ``latency_ms`` when the calls were not timed.
    """

    kind: str
    text: str
    tool_calls: tuple[ToolCallSeen, ...] = ()
    tokens: int | None = None
    cost: Decimal | None = None
    currency: str | None = None
    latency_ms: float | None = None
    model_calls: int = 0

    @classmethod
    def of(
        cls,
        result: Mapping[str, Any],
        answers: Sequence[Mapping[str, Any] | None],
        *,
        tokens: int | None = None,
        cost: Decimal | None = None,
        currency: str | None = None,
        latency_ms: float | None = None,
    ) -> TurnFacts:
        """The facts of an ``InvokeResult`` in wire form and the model's answers (as a
        recording holds them: ``Text``, ``ToolCalls``, …)."""
        response = result.get("Result") if result.get("Successful") else None
        if not isinstance(response, Mapping):
            kind, text = "error", ""
        else:
            kind = str(response.get("Kind", "final"))
            text = str(
                response.get("PrimaryOutputText") or response.get("ToolContinuationMessage") or ""
            )
        calls: list[ToolCallSeen] = []
        for answer in answers:
            for call in (answer or {}).get("ToolCalls") or ():
                raw = call.get("ArgumentsJson", "")
                try:
                    arguments = json.loads(raw) if isinstance(raw, str) else raw
                except ValueError:
                    arguments = raw
                calls.append(ToolCallSeen(str(call.get("Name")), arguments))
        return cls(kind, text, tuple(calls), tokens, cost, currency, latency_ms, len(answers))


@dataclass(frozen=True, slots=True)
class ArgumentMatcher:
    """One check of a tool call's arguments at a JSON path (``$.path``, ``items[0].id``):
    ``equals`` a value, ``contains`` a text or an item, ``matches`` a regular expression
    (searched in a text; any other value in its JSON)."""

    path: str
    steps: tuple[str | int, ...]
    equals: Any = _UNSET
    contains: Any = _UNSET
    matches: re.Pattern[str] | None = None

    def failure(self, arguments: Any) -> str | None:
        """Why ``arguments`` fail this check, or ``None``."""
        value: Any = arguments
        for step in self.steps:
            if not _has(value, step):
                return f"{self.path} is absent"
            value = value[step]
        if self.equals is not _UNSET and not _equal(value, self.equals):
            return f"{self.path} is {_shown(value)}, not {_shown(self.equals)}"
        if self.contains is not _UNSET:
            inside = (
                isinstance(value, str) and isinstance(self.contains, str) and self.contains in value
            ) or (isinstance(value, list) and any(_equal(v, self.contains) for v in value))
            if not inside:
                return f"{self.path} ({_shown(value)}) does not contain {_shown(self.contains)}"
        if self.matches is not None:
            text = value if isinstance(value, str) else json.dumps(value)
            if self.matches.search(text) is None:
                return f"{self.path} ({_shown(value)}) does not match /{self.matches.pattern}/"
        return None


@dataclass(frozen=True, slots=True)
class ToolExpectation:
    """A tool the model must (or must not) call, with its argument checks: a call of
    ``tool`` whose arguments pass every check matches."""

    tool: str
    arguments: tuple[ArgumentMatcher, ...] = ()

    def matching(self, calls: Sequence[ToolCallSeen]) -> list[ToolCallSeen]:
        """The calls that match."""
        return [
            call
            for call in calls
            if call.name == self.tool
            and all(m.failure(call.arguments) is None for m in self.arguments)
        ]

    def describe(self) -> str:
        """``read_file`` or ``read_file($.path equals "src/app.py")``."""
        if not self.arguments:
            return self.tool
        checks = []
        for matcher in self.arguments:
            for word in ("equals", "contains"):
                value = getattr(matcher, word)
                if value is not _UNSET:
                    checks.append(f"{matcher.path} {word} {_shown(value)}")
            if matcher.matches is not None:
                checks.append(f"{matcher.path} matches /{matcher.matches.pattern}/")
        return f"{self.tool}({', '.join(checks)})"


@dataclass(frozen=True, slots=True)
class Expectations:
    """One case's expectations (docs/EVALS.md "Expectations"); all optional.

    ``allow_divergence``: whether the case may diverge from its recording and pass.
    ``None`` (not given): it may when it has any other expectation, and may not when
    it has none — a case without expectations expects what the recording did (D622).
    """

    kind: str | None = None
    calls: tuple[ToolExpectation, ...] = ()
    no_calls: tuple[ToolExpectation, ...] = ()
    text_contains: tuple[str, ...] = ()
    text_not_contains: tuple[str, ...] = ()
    text_matches: tuple[re.Pattern[str], ...] = ()
    max_tokens: int | None = None
    max_cost: Decimal | None = None
    max_latency_ms: float | None = None
    allow_divergence: bool | None = None

    @property
    def any(self) -> bool:
        """Whether anything is expected besides (or about) divergence."""
        return bool(
            self.kind is not None
            or self.calls
            or self.no_calls
            or self.text_contains
            or self.text_not_contains
            or self.text_matches
            or self.max_tokens is not None
            or self.max_cost is not None
            or self.max_latency_ms is not None
        )

    @property
    def divergence_fails(self) -> bool:
        """Whether a divergence from the recording fails the case."""
        if self.allow_divergence is None:
            return not self.any
        return not self.allow_divergence

    @classmethod
    def parse(cls, data: object, where: str) -> Expectations:
        """A case's table; ``ValueError`` naming ``where`` (file and case) and the key."""
        if not isinstance(data, Mapping):
            raise ValueError(f"{where}: a case's expectations are a table")
        unknown = sorted(set(data) - _KEYS)
        if unknown:
            raise ValueError(
                f"{where}: unknown key {unknown[0]!r} (expectations: {', '.join(sorted(_KEYS))})"
            )
        kind = data.get("kind")
        if kind is not None and kind not in FINAL_KINDS:
            raise ValueError(f"{where}.kind: one of {', '.join(FINAL_KINDS)}, not {kind!r}")
        return cls(
            kind=kind,
            calls=_tools(data.get("calls", ()), f"{where}.calls"),
            no_calls=_tools(data.get("no_calls", ()), f"{where}.no_calls"),
            text_contains=_texts(data.get("text_contains", ()), f"{where}.text_contains"),
            text_not_contains=_texts(
                data.get("text_not_contains", ()), f"{where}.text_not_contains"
            ),
            text_matches=tuple(
                _regex(text, f"{where}.text_matches")
                for text in _texts(data.get("text_matches", ()), f"{where}.text_matches")
            ),
            max_tokens=_whole(data.get("max_tokens"), f"{where}.max_tokens"),
            max_cost=_amount(data.get("max_cost"), f"{where}.max_cost"),
            max_latency_ms=_number(data.get("max_latency_ms"), f"{where}.max_latency_ms"),
            allow_divergence=_flag(data.get("allow_divergence"), f"{where}.allow_divergence"),
        )

    def check(self, facts: TurnFacts, diverged: bool) -> list[str]:
        """Each expectation ``facts`` fail, as one line; none: the case passes."""
        failed: list[str] = []
        if diverged and self.divergence_fails:
            failed.append("same as recorded: the turn diverged from its recording")
        if self.kind is not None and facts.kind != self.kind:
            failed.append(f"kind {self.kind}: the turn ended {facts.kind}")
        for expected in self.calls:
            if not expected.matching(facts.tool_calls):
                called = [call.name for call in facts.tool_calls if call.name == expected.tool]
                why = "called, but not so" if called else "not called"
                failed.append(f"calls {expected.describe()}: {why}")
        for refused in self.no_calls:
            if refused.matching(facts.tool_calls):
                failed.append(f"no_calls {refused.describe()}: called")
        failed.extend(
            f"text_contains {_shown(text)}: not in the text"
            for text in self.text_contains
            if text not in facts.text
        )
        failed.extend(
            f"text_not_contains {_shown(text)}: in the text"
            for text in self.text_not_contains
            if text in facts.text
        )
        failed.extend(
            f"text_matches /{pattern.pattern}/: no match"
            for pattern in self.text_matches
            if pattern.search(facts.text) is None
        )
        if self.max_tokens is not None:
            if facts.tokens is None:
                failed.append(f"max_tokens {self.max_tokens}: the model reported no usage")
            elif facts.tokens > self.max_tokens:
                failed.append(f"max_tokens {self.max_tokens}: {facts.tokens} tokens")
        if self.max_cost is not None:
            if facts.cost is None:
                failed.append(f"max_cost {self.max_cost}: the calls are unpriced")
            elif facts.cost > self.max_cost:
                failed.append(f"max_cost {self.max_cost}: cost {facts.cost} {facts.currency}")
        if self.max_latency_ms is not None:
            if facts.latency_ms is None:
                failed.append(f"max_latency_ms {self.max_latency_ms:g}: not timed")
            elif facts.latency_ms > self.max_latency_ms:
                failed.append(f"max_latency_ms {self.max_latency_ms:g}: {facts.latency_ms:.1f} ms")
        return failed


def _has(value: Any, step: str | int) -> bool:
    """Whether a JSON value has this key (an object) or index (a list)."""
    if isinstance(step, int):
        return isinstance(value, list) and step < len(value)
    return isinstance(value, Mapping) and step in value


def _shown(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _equal(left: Any, right: Any) -> bool:
    """Equal as JSON values: ``True`` is not ``1``."""
    if isinstance(left, bool) or isinstance(right, bool):
        return type(left) is type(right) and left == right
    return bool(left == right)


def _texts(value: object, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list | tuple) and all(isinstance(item, str) for item in value):
        return tuple(value)
    raise ValueError(f"{where}: a text or a list of texts")


def _regex(text: str, where: str) -> re.Pattern[str]:
    try:
        return re.compile(text)
    except re.error as error:
        raise ValueError(f"{where}: not a regular expression ({error}): {text!r}") from None


def _whole(value: object, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{where}: a whole number, 0 or more, not {value!r}")
    return value


def _number(value: object, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal) or value < 0:
        raise ValueError(f"{where}: a number, 0 or more, not {value!r}")
    return float(value)


def _amount(value: object, where: str) -> Decimal | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int | float | Decimal):
        raise ValueError(f'{where}: an amount ("0.05"), not {value!r}')
    try:
        amount = Decimal(str(value))
    except InvalidOperation:
        raise ValueError(f'{where}: an amount ("0.05"), not {value!r}') from None
    if not amount.is_finite() or amount < 0:
        raise ValueError(f"{where}: an amount, 0 or more, not {value!r}")
    return amount


def _flag(value: object, where: str) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise ValueError(f"{where}: true or false, not {value!r}")


def _tools(value: object, where: str) -> tuple[ToolExpectation, ...]:
    """``calls`` / ``no_calls``: tool names, or tables ``{tool = …, arguments = [...]}``."""
    if isinstance(value, str | Mapping):
        value = [value]
    if not isinstance(value, list | tuple):
        raise ValueError(f"{where}: a list of tool names or {{tool = …, arguments = [...]}}")
    tools = []
    for index, item in enumerate(value):
        at = f"{where}[{index}]"
        if isinstance(item, str) and item:
            tools.append(ToolExpectation(item))
            continue
        if not isinstance(item, Mapping):
            raise ValueError(f"{at}: a tool name or a table with tool (and arguments)")
        unknown = sorted(set(item) - _CALL_KEYS)
        if unknown:
            raise ValueError(f"{at}: unknown key {unknown[0]!r} (tool, arguments)")
        tool = item.get("tool")
        if not isinstance(tool, str) or not tool:
            raise ValueError(f"{at}.tool: the tool's name")
        matchers = item.get("arguments", ())
        if isinstance(matchers, Mapping):
            matchers = [matchers]
        if not isinstance(matchers, list | tuple):
            raise ValueError(f"{at}.arguments: a list of {{path = …, equals|contains|matches = …}}")
        tools.append(
            ToolExpectation(
                tool,
                tuple(_matcher(m, f"{at}.arguments[{i}]") for i, m in enumerate(matchers)),
            )
        )
    return tuple(tools)


def _matcher(data: object, where: str) -> ArgumentMatcher:
    if not isinstance(data, Mapping):
        raise ValueError(f"{where}: a table {{path = …, equals|contains|matches = …}}")
    unknown = sorted(set(data) - _MATCHER_KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown key {unknown[0]!r} (path, equals, contains, matches)")
    path = data.get("path", "$")
    if not isinstance(path, str):
        raise ValueError(f"{where}.path: a JSON path such as $.path or $.items[0].name")
    if not any(key in data for key in ("equals", "contains", "matches")):
        raise ValueError(f"{where}: give equals, contains or matches")
    matches = data.get("matches")
    if matches is not None and not isinstance(matches, str):
        raise ValueError(f"{where}.matches: a regular expression, as text")
    return ArgumentMatcher(
        path,
        _steps(path, f"{where}.path"),
        equals=_plain(data["equals"]) if "equals" in data else _UNSET,
        contains=_plain(data["contains"]) if "contains" in data else _UNSET,
        matches=None if matches is None else _regex(matches, f"{where}.matches"),
    )


def _plain(value: Any) -> Any:
    """A TOML value as the JSON value it stands for (an exact decimal as a number)."""
    if isinstance(value, Decimal):
        return (
            int(value)
            if value == value.to_integral_value() and "." not in str(value)
            else float(value)
        )
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _steps(path: str, where: str) -> tuple[str | int, ...]:
    """``$.a.b[0]`` (or ``a.b[0]``) as its steps; ``$`` alone is the whole arguments."""
    rest = path.strip()
    rest = rest[1:] if rest.startswith("$") else rest
    if rest and not rest.startswith((".", "[")):
        rest = "." + rest
    steps: list[str | int] = []
    at = 0
    while at < len(rest):
        match = _STEP.match(rest, at)
        if match is None:
            raise ValueError(f"{where}: not a JSON path ($.key, $.list[0].key): {path!r}")
        steps.append(match.group(1) if match.group(1) is not None else int(match.group(2)))
        at = match.end()
    return tuple(steps)
