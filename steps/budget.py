"""Usage and budgets around each model call (issue 31, docs/BUDGETS.md).

Before each model call — the guard of ``llm_client`` (``engine/machine.py``) — the
engine reserves the call's estimate against every budget that applies
(``reserve_call``): the prompt's estimated tokens plus the call's output cap, its
cost at the model's price, one model call. The store's ``UsageLedger`` counts what
each budget already holds and takes the reservation only when all of them still fit,
in one atomic step; the settlement of the turn's previous call travels with it, so
reserving and settling cost one round trip per model call. A call that does not fit
is not made: the turn faults with ``budget_exceeded`` under ``DESIGN/budget/within``,
the error naming the budget, its window, what remains and, for a windowed budget,
when to try again (``BudgetRefusal``).

After the call (``call_settled``) its actual figures replace the estimate: reported
tokens (cached and reasoning ones too), its cost at the price table (or *unpriced*),
the tool calls it asked for and whether it needed a server-tool round. A model that
reports no usage stays charged its estimate's tokens and is marked unreported, never
counted as zero. The last call of a request is settled when the turn ends
(``settle_turn``), whatever its end.

``estimate_prompt_tokens`` is the engine's reckoning of a request's tokens, about four
characters to a token: a model whose reported usage is above its estimate can take a
budget past its limit by at most the reservations in flight (docs/BUDGETS.md).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from decimal import Decimal

from aptix_pipeline.contracts import (
    Budget,
    BudgetCheck,
    BudgetMetric,
    BudgetRefusal,
    BudgetScope,
    BudgetWindow,
    Charge,
    ChatMessage,
    ErrorCode,
    ImagePart,
    InvokeError,
    LLMReply,
    LLMRequest,
    PriceTable,
    ToolDefinition,
    UsageCall,
    scrubbed_logger,
)
from aptix_pipeline.validators import BUDGET_UNPRICED, BUDGET_WITHIN

from .exception_text import PROPAGATED, error_text
from .faults import StepFaultError
from .scope import TurnScope

__all__ = [
    "IMAGE_TOKENS",
    "budget_checks",
    "call_estimate",
    "call_settled",
    "estimate_prompt_tokens",
    "refusal",
    "reserve_call",
    "settle_turn",
]

logger = scrubbed_logger(__name__)

CHARS_PER_TOKEN = 4
IMAGE_TOKENS = 1_000
"""What one image of a prompt is reckoned at."""
MESSAGE_TOKENS = 4
"""Each message's own framing."""


def _message_chars(message: ChatMessage) -> tuple[int, int]:
    """A message's characters (its text; an image's reference too) and its images."""
    chars = len(message.content) + len(message.tool_call_id or "")
    for call in message.tool_calls or ():
        chars += len(call.name) + len(call.arguments_json) + len(call.tool_call_id)
    images = sum(1 for part in message.parts or () if isinstance(part, ImagePart))
    return chars, images


_TOOL_CHARS: dict[int, tuple[ToolDefinition, int]] = {}
"""Each tool definition's characters by ``id``, the definition kept so its ``id`` stays
its own: a catalog hands out the same definitions turn after turn."""
_TOOL_CHARS_KEPT = 4096


def _tool_chars(tool: ToolDefinition) -> int:
    held = _TOOL_CHARS.get(id(tool))
    if held is not None and held[0] is tool:
        return held[1]
    size = len(tool.name) + len(tool.description) + len(json.dumps(tool.parameters))
    if len(_TOOL_CHARS) >= _TOOL_CHARS_KEPT:
        _TOOL_CHARS.clear()
    _TOOL_CHARS[id(tool)] = (tool, size)
    return size


def _tokens(chars: int, messages: int, images: int) -> int:
    return math.ceil(chars / CHARS_PER_TOKEN) + MESSAGE_TOKENS * messages + IMAGE_TOKENS * images


def estimate_prompt_tokens(request: LLMRequest) -> int:
    """The tokens ``request``'s prompt is reckoned at: its text (messages, tool calls,
    tool definitions) at four characters a token, each message's framing, and
    ``IMAGE_TOKENS`` per image."""
    chars = images = 0
    for message in request.messages:
        more, pictures = _message_chars(message)
        chars += more
        images += pictures
    chars += sum(_tool_chars(tool) for tool in request.tools)
    return _tokens(chars, len(request.messages), images)


def _reckoned(scope: TurnScope, request: LLMRequest) -> int:
    """``estimate_prompt_tokens(request)`` for the turn's next call, counting only what
    is new since its last: the turn's messages only grow, and its tools are the same
    objects call after call. ``request`` is ``[system, *scope.messages]``."""
    reckoning = scope.reckoning
    messages = scope.messages
    counted, chars, images = reckoning.messages, reckoning.chars, reckoning.images
    if counted and (counted > len(messages) or messages[counted - 1] is not reckoning.last):
        counted = chars = images = 0  # the messages were replaced, not added to: count anew
    for message in messages[counted:]:
        more, pictures = _message_chars(message)
        chars += more
        images += pictures
    reckoning.messages, reckoning.chars, reckoning.images = len(messages), chars, images
    reckoning.last = messages[-1] if messages else None
    system, _ = _message_chars(request.messages[0])
    for tool in request.tools:
        chars += _tool_chars(tool)
    return _tokens(chars + system, len(messages) + 1, images)


def call_estimate(
    request: LLMRequest, prices: PriceTable | None, output_estimate: int
) -> tuple[Charge, str | None]:
    """What a call of ``request`` is reserved at, and the currency of its price
    (``None``: unpriced)."""
    return _estimate(estimate_prompt_tokens(request), request, prices, output_estimate)


def _estimate(
    prompt: int, request: LLMRequest, prices: PriceTable | None, output_estimate: int
) -> tuple[Charge, str | None]:
    output = request.max_output_tokens or output_estimate
    price = None if prices is None else prices.price(request.model)
    cost = Decimal(0) if price is None else price.tokens_cost(prompt, output)
    currency = None if price is None else price.currency
    return Charge(tokens=prompt + output, cost=cost, model_calls=1), currency


def budget_checks(
    budgets: Sequence[Budget],
    *,
    org: str,
    user: str,
    mode: str,
    turn_id: str,
    now: datetime,
    charge: Charge,
    currency: str | None,
) -> list[BudgetCheck]:
    """The checks of the budgets that apply to a call by ``user`` of ``org`` in
    ``mode``, each with what ``charge`` adds to it (a cost budget counts only calls
    priced in its currency)."""
    checks = []
    for budget in budgets:
        if not budget.applies(org, user, mode):
            continue
        per = budget.per
        by_user = per in (BudgetScope.USER, BudgetScope.USER_MODE) or budget.user is not None
        by_mode = per in (BudgetScope.MODE, BudgetScope.USER_MODE) or budget.mode is not None
        amount = charge.of(budget.metric)
        if budget.metric is BudgetMetric.COST and currency != budget.currency:
            amount = Decimal(0)
        checks.append(
            BudgetCheck(
                budget_id=budget.id,
                metric=budget.metric,
                limit=budget.limit,
                amount=amount,
                org=org,
                user=user if by_user else None,
                mode=mode if by_mode else None,
                turn_id=turn_id if budget.window is BudgetWindow.TURN else None,
                since=budget.window_start(now),
                currency=budget.currency,
                window=budget.window,
            )
        )
    return checks


def refusal(
    budget: Budget, check: BudgetCheck, used: Decimal, oldest: datetime | None, now: datetime
) -> InvokeError:
    """The ``budget_exceeded`` error of a call ``budget`` refused."""
    remaining = max(budget.limit - used, Decimal(0))
    ends = budget.window_end(now)
    retry: int | None = None
    if ends is not None:
        retry = max(1, math.ceil((ends - now).total_seconds()))
    elif budget.window is BudgetWindow.ROLLING and budget.rolling_seconds is not None:
        back = (oldest or now).timestamp() + budget.rolling_seconds - now.timestamp()
        retry = max(1, math.ceil(back))
    unit = f" {budget.currency}" if budget.currency else f" {budget.metric.value}"
    whose = f"org {check.org}"
    if check.user is not None:
        whose += f", user {check.user}"
    if check.mode is not None:
        whose += f", mode {check.mode}"
    message = (
        f"budget {budget.id!r} ({budget.metric.value} {budget.describe_window()}, {whose}): "
        f"{remaining}{unit} of {budget.limit} remain, the call needs {check.amount}"
    )
    return BUDGET_WITHIN.error(
        message,
        field=f"budgets.{budget.id}",
    ).model_copy(
        update={
            "budget": BudgetRefusal(
                budget_id=budget.id,
                metric=budget.metric.value,
                window=budget.describe_window(),
                limit=budget.limit,
                used=used,
                requested=check.amount,
                remaining=remaining,
                currency=budget.currency,
                window_ends_at=ends,
                retry_after_seconds=retry,
            )
        }
    )


def _call_request(scope: TurnScope, request: LLMRequest) -> UsageCall:
    ctx, caller = scope.ctx, scope.caller
    options = scope.options
    prompt = (
        _reckoned(scope, request)
        if len(request.messages) == len(scope.messages) + 1
        else estimate_prompt_tokens(request)
    )
    charge, currency = _estimate(prompt, request, options.prices, options.output_tokens_estimate)
    session_id = ctx.session.id if ctx.session is not None else ""
    turn_id = ctx.turn.id if ctx.turn is not None else ""
    round_ = scope.llm_calls + 1
    return UsageCall(
        # the request's correlation id is new per request: no id port call is needed
        id=f"{turn_id}/{ctx.correlation_id}/{round_}",
        org=caller.org,
        user=caller.user,
        session_id=session_id,
        turn_id=turn_id,
        mode=request.mode,
        model=request.model,
        at=scope.ports.clock.now(),
        round=round_,
        charge=charge,
        currency=currency,
    )


async def reserve_call(scope: TurnScope, request: LLMRequest) -> None:
    """Reserve the next model call of ``request`` against every budget, settling the
    turn's previous call with it; fault with ``budget_exceeded`` when it does not fit
    (module docstring). Nothing when the turn keeps no usage."""
    ledger = scope.ports.usage
    if ledger is None:
        return
    options = scope.options
    call = _call_request(scope, request)
    prices = options.prices
    if call.currency is None and prices is not None and prices.refuses_unpriced:
        await _flush(scope)
        raise StepFaultError(
            [
                BUDGET_UNPRICED.error(
                    f"model {request.model or '(the default)'} has no price, and "
                    '[prices] unknown = "refuse"',
                    field="prices",
                )
            ]
        )
    checks = budget_checks(
        options.budgets,
        org=call.org,
        user=call.user,
        mode=call.mode,
        turn_id=call.turn_id,
        now=call.at,
        charge=call.charge,
        currency=call.currency,
    )
    settle, scope.unsettled = scope.unsettled, []
    try:
        outcome = await ledger.reserve_usage(call, checks, settle)
    except PROPAGATED:
        raise
    except Exception as error:
        told = error_text(error, options.error_detail)
        raise StepFaultError(
            [
                InvokeError(
                    code=ErrorCode.PORT_FAILED,
                    field="UsageLedger",
                    message=f"the usage ledger failed: {told}",
                )
            ]
        ) from error
    if not outcome.reserved:
        budget = next(b for b in options.budgets if b.id == outcome.refused_by)
        check = next(c for c in checks if c.budget_id == outcome.refused_by)
        used = outcome.used.get(check.budget_id, Decimal(0))
        raise StepFaultError([refusal(budget, check, used, outcome.oldest, call.at)])
    scope.reserved = call


def call_settled(scope: TurnScope, reply: LLMReply | None) -> UsageCall | None:
    """The reserved call with what it actually took (``reply``; ``None``: the call
    failed); kept to be settled with the next reservation or at the turn's end. Called
    once the step has handled the reply, so ``scope.another_round`` says whether it
    needed a server-tool round."""
    call, scope.reserved = scope.reserved, None
    if call is None:
        return None
    if reply is None:
        settled = replace(call, settled=True, failed=True, charge=Charge(), currency=None)
    else:
        settled = _actual(call, reply, scope.options.prices, scope.another_round)
    scope.unsettled.append(settled)
    return settled


def _actual(
    call: UsageCall, reply: LLMReply, prices: PriceTable | None, round_needed: bool
) -> UsageCall:
    usage = reply.usage
    model = reply.model or call.model  # the model that answered, as the spans price it (D586)
    tool_calls = len(reply.tool_calls)
    rounds = 1 if round_needed else 0
    if usage is None:  # unreported: its estimate's tokens stand, its cost is unknown
        return replace(
            call,
            settled=True,
            model=model,
            cost=None,
            priced=False,
            currency=None,
            tool_calls=tool_calls,
            server_tool_round=round_needed,
            charge=Charge(
                tokens=call.charge.tokens,
                model_calls=1,
                tool_calls=tool_calls,
                server_tool_rounds=rounds,
            ),
        )
    priced = None if prices is None else prices.cost(model, usage)
    cost, currency = (None, None) if priced is None else priced
    return replace(
        call,
        settled=True,
        model=model,
        reported=True,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cached_input_tokens=usage.cached_input_tokens or 0,
        reasoning_tokens=usage.reasoning_tokens or 0,
        priced=priced is not None,
        cost=cost,
        currency=currency,
        tool_calls=tool_calls,
        server_tool_round=round_needed,
        charge=Charge(
            tokens=usage.input_tokens + usage.output_tokens,
            cost=cost or Decimal(0),
            model_calls=1,
            tool_calls=tool_calls,
            server_tool_rounds=rounds,
        ),
    )


async def _flush(scope: TurnScope) -> None:
    ledger = scope.ports.usage
    if scope.reserved is not None:  # reserved, never called: released
        call_settled(scope, None)
    unsettled, scope.unsettled = scope.unsettled, []
    if ledger is not None and unsettled:
        await ledger.settle_usage(unsettled)


async def settle_turn(scope: TurnScope) -> None:
    """Settle what the request has not settled yet, at its end; a failing ledger is
    logged, never the turn's failure (its answer stands)."""
    try:
        await _flush(scope)
    except Exception:
        logger.exception("settling the turn's model usage failed")
