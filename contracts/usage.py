"""Usage, prices and budgets: what each model call cost, and what a tenant may still spend
(issue 31, DESIGN.md "Tools, cost and history", docs/BUDGETS.md).

- ``Price`` / ``PriceTable`` — prices per model, per million tokens, in one currency;
  ``PriceTable.cost`` prices a call's ``Usage`` in exact decimal arithmetic
  (``None`` when the model has no price: the call is *unpriced*, never free).
- ``BudgetMetric`` / ``BudgetWindow`` / ``Budget`` — a limit on tokens, cost, model
  calls, tool calls or server-tool rounds, per org (and per user and/or mode), over
  a turn, a UTC day, a UTC month or a rolling number of seconds.
- ``Charge`` — what one model call counts against budgets: its estimate while
  reserved, its actual figures once settled.
- ``UsageCall`` — one model call in the usage ledger: who made it, where, its
  tokens (cached and reasoning ones included when the model reports them), its
  cost and its ``Charge``.
- ``BudgetCheck`` — one budget as the store checks it before a call: the calls it
  counts (``matches``), its limit and what the call would add.
- ``ReserveOutcome`` — what the store answers a reservation.
- ``UsageQuery`` — which calls a report reads.
``Charge``, ``UsageCall``, ``BudgetCheck``, ``ReserveOutcome`` and ``UsageQuery`` are
frozen dataclasses, not wire models: they are made several times per model call, and
a dataclass costs a tenth of a validated model (issue 31's ≤ 5 % target). Where they
travel as JSON (a recording, a durable turn's activity) pydantic's ``TypeAdapter``
reads and writes them, validating their types.

- ``UsageLedger`` — the port: ``reserve_usage`` (settle the previous call of the
  turn, then reserve the next one if every check holds: one atomic step, one round
  trip), ``settle_usage`` and ``usage_calls``. The memory, SQLite and PostgreSQL
  stores implement it beside ``SessionStore``.

A model that reports no usage is marked so (``UsageCall.reported`` is ``False``): its
tokens are not known, so it is never counted as zero tokens; budgets keep charging
it its estimate.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from enum import StrEnum
from typing import Final, Protocol, runtime_checkable

from pydantic import ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_pascal

from .response import Usage
from .wire import FrozenWireModel

__all__ = [
    "MILLION",
    "Budget",
    "BudgetCheck",
    "BudgetMetric",
    "BudgetScope",
    "BudgetWindow",
    "Charge",
    "Price",
    "PriceTable",
    "ReserveOutcome",
    "UnpricedPolicy",
    "UsageCall",
    "UsageLedger",
    "UsageQuery",
]

MILLION: Final = Decimal(1_000_000)

_AS_WIRE = ConfigDict(
    alias_generator=to_pascal,
    validate_by_alias=True,
    validate_by_name=True,
    serialize_by_alias=True,
)
"""How pydantic reads and writes the usage dataclasses: in the wire models' PascalCase,
so a recording holds them as it holds every other port value."""

_CURRENCY = re.compile(r"^[A-Z]{3}$")
_BUDGET_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")


class UnpricedPolicy(StrEnum):
    """What a model call without a price does (``[prices] unknown``)."""

    REFUSE = "refuse"
    """The call is not made: the turn ends with ``budget_exceeded`` under
    ``DESIGN/budget/unpriced``. Nothing is spent that no price covers."""
    COUNT = "count"
    """The call is made and counted as unpriced: every report says how many such calls
    its cost leaves out, so a sum is never silently partial."""


class Price(FrozenWireModel):
    """A model's price per million tokens: input, output and cached input."""

    model: str = Field(min_length=1)
    input_per_million: Decimal = Field(ge=0)
    output_per_million: Decimal = Field(ge=0)
    cached_input_per_million: Decimal | None = Field(default=None, ge=0)
    """``None``: cached input tokens cost as much as other input tokens."""
    currency: str = "USD"

    @field_validator("currency")
    @classmethod
    def _iso_4217(cls, value: str) -> str:
        if not _CURRENCY.match(value):
            raise ValueError(f"currency must be a three-letter ISO 4217 code, not {value!r}")
        return value

    def cost(self, usage: Usage) -> Decimal:
        """The exact cost of ``usage`` at this price.

        Cached input tokens are part of ``input_tokens`` (as OpenAI reports them): they
        are priced at ``cached_input_per_million`` and the rest at ``input_per_million``.
        """
        return self.tokens_cost(
            usage.input_tokens, usage.output_tokens, usage.cached_input_tokens or 0
        )

    def tokens_cost(self, input_tokens: int, output_tokens: int, cached: int = 0) -> Decimal:
        """The exact cost of so many tokens (``cached`` of the input ones) at this price."""
        cached = min(cached, input_tokens)
        cached_price = (
            self.input_per_million
            if self.cached_input_per_million is None
            else self.cached_input_per_million
        )
        total = (
            (input_tokens - cached) * self.input_per_million
            + cached * cached_price
            + output_tokens * self.output_per_million
        )
        return total / MILLION


class PriceTable(FrozenWireModel):
    """Prices by model name, and what a call of a model without a price does.

    A model matches a price by its exact name first, then by the longest price whose
    name ends in ``*`` and is a prefix of it (``gpt-4o*``); ``default`` prices every
    other model when set.
    """

    prices: tuple[Price, ...] = ()
    default: Price | None = None
    unknown: UnpricedPolicy = UnpricedPolicy.COUNT

    @model_validator(mode="after")
    def _one_price_per_model(self) -> PriceTable:
        seen: set[str] = set()
        for price in self.prices:
            if price.model in seen:
                raise ValueError(f"prices: model {price.model!r} is priced twice")
            seen.add(price.model)
        return self

    @property
    def refuses_unpriced(self) -> bool:
        """Whether a call of a model without a price is refused (``unknown = "refuse"``)."""
        return self.unknown is UnpricedPolicy.REFUSE

    def price(self, model: str | None) -> Price | None:
        """The price of ``model``: exact, else the longest ``prefix*``, else ``default``."""
        if model is not None:
            best: Price | None = None
            for price in self.prices:
                name = price.model
                if name == model:
                    return price
                if (
                    name.endswith("*")
                    and model.startswith(name[:-1])
                    and (best is None or len(name) > len(best.model))
                ):
                    best = price
            if best is not None:
                return best
        return self.default

    def cost(self, model: str | None, usage: Usage) -> tuple[Decimal, str] | None:
        """The cost of ``usage`` on ``model`` and its currency; ``None``: unpriced."""
        price = self.price(model)
        return None if price is None else (price.cost(usage), price.currency)


class BudgetMetric(StrEnum):
    """What a budget limits."""

    TOKENS = "tokens"
    """Input and output tokens (cached and reasoning tokens are among them)."""
    COST = "cost"
    """Cost in the budget's currency, by the price table."""
    MODEL_CALLS = "model_calls"
    TOOL_CALLS = "tool_calls"
    """Tool calls the model made (client and server ones)."""
    SERVER_TOOL_ROUNDS = "server_tool_rounds"
    """Model replies the engine answered itself and called the model again for."""


class BudgetWindow(StrEnum):
    """Over what a budget's limit holds."""

    TURN = "turn"
    """One turn, over all its requests (its continuations included)."""
    DAY = "day"
    """A UTC calendar day."""
    MONTH = "month"
    """A UTC calendar month."""
    ROLLING = "rolling"
    """The last ``Budget.rolling_seconds`` seconds."""


class BudgetScope(StrEnum):
    """Whose spending a budget counts, inside one org."""

    ORG = "org"
    """Everyone's in the org, together."""
    USER = "user"
    """Each user's on their own."""
    MODE = "mode"
    """Each mode's on its own."""
    USER_MODE = "user_mode"
    """Each user's in each mode on their own."""


class Budget(FrozenWireModel):
    """A limit on spending (docs/BUDGETS.md).

    ``org``, ``user`` and ``mode`` say where the budget applies (``None``: everywhere);
    ``per`` says whose spending it counts together. A budget of ``per = "user"`` and
    no ``user`` gives every user of every org the same limit, each on their own.
    """

    id: str
    metric: BudgetMetric
    limit: Decimal = Field(ge=0)
    window: BudgetWindow
    rolling_seconds: int | None = Field(default=None, gt=0)
    per: BudgetScope = BudgetScope.ORG
    org: str | None = None
    user: str | None = None
    mode: str | None = None
    currency: str | None = None
    """The currency of a cost budget (default USD); only calls priced in it count."""

    @field_validator("id")
    @classmethod
    def _id_shape(cls, value: str) -> str:
        if not _BUDGET_ID.match(value):
            raise ValueError(
                f"budget id {value!r} must be 1-128 letters, digits, '.', '_', ':' or '-'"
            )
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Budget:
        rolling = self.window is BudgetWindow.ROLLING
        if rolling != (self.rolling_seconds is not None):
            raise ValueError(
                f"budget {self.id!r}: rolling_seconds is needed for a rolling window, "
                "and only for one"
            )
        if self.metric is BudgetMetric.COST:
            if self.currency is None:
                object.__setattr__(self, "currency", "USD")
            elif not _CURRENCY.match(self.currency):
                raise ValueError(
                    f"budget {self.id!r}: currency must be a three-letter ISO 4217 code"
                )
        elif self.currency is not None:
            raise ValueError(f"budget {self.id!r}: only a cost budget has a currency")
        elif self.limit != self.limit.to_integral_value():
            raise ValueError(f"budget {self.id!r}: a {self.metric.value} limit is a whole number")
        return self

    def applies(self, org: str, user: str, mode: str) -> bool:
        """Whether the budget covers a call by ``user`` of ``org`` in ``mode``."""
        return (
            (self.org is None or self.org == org)
            and (self.user is None or self.user == user)
            and (self.mode is None or self.mode == mode)
        )

    def window_start(self, now: datetime) -> datetime | None:
        """Where the window holding ``now`` begins; ``None`` for a turn's window."""
        now = now.astimezone(UTC)
        if self.window is BudgetWindow.DAY:
            return now.replace(hour=0, minute=0, second=0, microsecond=0)
        if self.window is BudgetWindow.MONTH:
            return now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        if self.window is BudgetWindow.ROLLING:
            assert self.rolling_seconds is not None
            return now - timedelta(seconds=self.rolling_seconds)
        return None

    def window_end(self, now: datetime) -> datetime | None:
        """When the calendar window holding ``now`` ends (``None`` for turn and rolling)."""
        start = self.window_start(now)
        if start is None or self.window is BudgetWindow.ROLLING:
            return None
        if self.window is BudgetWindow.DAY:
            return start + timedelta(days=1)
        if start.month == 12:
            return start.replace(year=start.year + 1, month=1)
        return start.replace(month=start.month + 1)

    def describe_window(self) -> str:
        """The window in words: ``per turn``, ``per day (UTC)``, ``per rolling 3600 s``."""
        if self.window is BudgetWindow.ROLLING:
            return f"per rolling {self.rolling_seconds} s"
        if self.window is BudgetWindow.TURN:
            return "per turn"
        return f"per {self.window.value} (UTC)"


@dataclass(frozen=True, slots=True)
class Charge:
    """What one model call counts against budgets, metric by metric."""

    __pydantic_config__ = _AS_WIRE

    tokens: int = 0
    cost: Decimal = Decimal(0)
    model_calls: int = 0
    tool_calls: int = 0
    server_tool_rounds: int = 0

    def of(self, metric: BudgetMetric) -> Decimal:
        """The charge's amount of ``metric``."""
        return Decimal(getattr(self, metric.value))


@dataclass(frozen=True, slots=True, kw_only=True)
class UsageCall:
    """One model call in the usage ledger (one row of a store's usage table).

    Reserved (``settled`` is ``False``) before the call, with its estimate as
    ``charge``; settled after it, with its actual figures. ``reported`` is whether
    the model reported its usage: when it did not, the token fields are 0 *and
    unknown* — reports count the call as unreported — and ``charge`` keeps the
    estimate's tokens. ``cost`` is ``None`` for an unpriced call (``priced`` is
    ``False``) and for a reservation. ``round`` is the call's number within its
    request (1 for the first model call); ``step`` the pipeline step that made it.
    """

    __pydantic_config__ = _AS_WIRE

    id: str
    org: str
    user: str
    session_id: str
    turn_id: str
    mode: str
    model: str | None = None
    at: datetime
    round: int = 1
    step: str = "llm_client"
    settled: bool = False
    charge: Charge = field(default_factory=Charge)
    reported: bool = False
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    reasoning_tokens: int = 0
    priced: bool = False
    cost: Decimal | None = None
    currency: str | None = None
    """The currency of the call's price (of its estimate while reserved); ``None``
    when the call is unpriced."""
    tool_calls: int = 0
    server_tool_round: bool = False
    failed: bool = False
    """The call failed: nothing came back, nothing is charged but the call itself."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetCheck:
    """One budget as a store checks it before a call.

    The calls it counts are those of ``org`` that ``matches``: of ``user`` and of
    ``mode`` when set, of ``turn_id`` when set (a turn's window), made at or after
    ``since`` when set, and, for a cost budget, priced in ``currency``. It holds when
    their charges of ``metric`` plus ``amount`` stay within ``limit``.
    """

    __pydantic_config__ = _AS_WIRE

    budget_id: str
    metric: BudgetMetric
    limit: Decimal
    amount: Decimal
    org: str
    user: str | None = None
    mode: str | None = None
    turn_id: str | None = None
    since: datetime | None = None
    currency: str | None = None
    window: BudgetWindow | None = None
    """The budget's window, for a store that keeps running totals: a calendar window's
    ``since`` stays the same call after call (a rolling one's moves with the clock)."""

    def matches(self, call: UsageCall) -> bool:
        """Whether ``call`` counts against this budget."""
        return (
            call.org == self.org
            and (self.user is None or call.user == self.user)
            and (self.mode is None or call.mode == self.mode)
            and (self.turn_id is None or call.turn_id == self.turn_id)
            and (self.since is None or call.at >= self.since)
            and (self.currency is None or call.currency == self.currency)
        )

    def counted(self, call: UsageCall) -> Decimal:
        """What ``call`` counts against this budget (0 when it does not match)."""
        return call.charge.of(self.metric) if self.matches(call) else Decimal(0)


@dataclass(frozen=True, slots=True)
class ReserveOutcome:
    """A store's answer to ``reserve_usage``.

    ``reserved``: every check held and the call is reserved. ``used`` is what each
    budget had counted before this call, by budget id. ``refused_by`` names the first
    check that failed; ``oldest`` is when the earliest call it counted was made (for
    a rolling window: when room begins to come back).
    """

    __pydantic_config__ = _AS_WIRE

    reserved: bool
    used: Mapping[str, Decimal] = field(default_factory=dict)
    refused_by: str | None = None
    oldest: datetime | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class UsageQuery:
    """Which calls a usage report reads: always one org's, and within it as narrowed."""

    __pydantic_config__ = _AS_WIRE

    org: str
    user: str | None = None
    mode: str | None = None
    model: str | None = None
    session_id: str | None = None
    turn_id: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    """Calls made before ``until`` (exclusive)."""

    def matches(self, call: UsageCall) -> bool:
        """Whether ``call`` is one the query reads."""
        return (
            call.org == self.org
            and (self.user is None or call.user == self.user)
            and (self.mode is None or call.mode == self.mode)
            and (self.model is None or call.model == self.model)
            and (self.session_id is None or call.session_id == self.session_id)
            and (self.turn_id is None or call.turn_id == self.turn_id)
            and (self.since is None or call.at >= self.since)
            and (self.until is None or call.at < self.until)
        )


@runtime_checkable
class UsageLedger(Protocol):
    """Where model calls are reserved against budgets and settled (module docstring).

    Reservations are committed on their own, at once, outside the turn's transaction:
    another process's turn must see them. Budgets hold across processes because
    ``reserve_usage`` runs its checks and its insert as one atomic step, serialized
    per org (PostgreSQL: an advisory lock per org in one round trip; SQLite: one
    ``BEGIN IMMEDIATE`` transaction).
    """

    async def reserve_usage(
        self,
        call: UsageCall,
        checks: Sequence[BudgetCheck],
        settle: Sequence[UsageCall] = (),
    ) -> ReserveOutcome:
        """Settle ``settle`` (calls reserved earlier, now with their actual figures), then
        reserve ``call`` if every check holds with ``call.charge`` added; one atomic step.
        A refused call is not stored; the settlements are, either way."""
        ...

    async def settle_usage(self, calls: Sequence[UsageCall]) -> None:
        """Replace each call's reservation with its settled figures (a call with no
        reservation is stored as given)."""
        ...

    async def usage_calls(self, query: UsageQuery) -> list[UsageCall]:
        """The calls ``query`` reads, oldest first."""
        ...


def _as_wire_when_jsonable() -> None:
    """Give each usage dataclass the serializer of its wire form, so that pydantic writes
    it in PascalCase wherever it meets one (``to_jsonable_python`` in a recording, a
    durable turn's payloads), as it writes the wire models beside it."""
    from pydantic import TypeAdapter

    kinds: tuple[type, ...] = (Charge, UsageCall, BudgetCheck, ReserveOutcome, UsageQuery)
    for kind in kinds:
        setattr(kind, "__pydantic_serializer__", TypeAdapter(kind).serializer)  # noqa: B010


_as_wire_when_jsonable()
