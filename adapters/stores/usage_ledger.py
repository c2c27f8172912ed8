"""What every store's ``UsageLedger`` shares: the verdict on a reservation once the
store has counted what each budget already holds (``contracts/usage.py``).

A store counts, inside its own atomic step, what each ``BudgetCheck`` matches; this
module decides from those sums whether the call fits, so the memory, SQLite and
PostgreSQL stores judge alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from decimal import Decimal

from aptix_pipeline.contracts import BudgetCheck, ReserveOutcome

__all__ = ["check_reservation"]


def check_reservation(
    checks: Sequence[BudgetCheck],
    used: Mapping[str, Decimal],
    oldest: Mapping[str, datetime | None],
) -> ReserveOutcome:
    """Whether a call fits every budget: ``used`` (by budget id) plus its ``amount``
    within ``limit``. The first check that does not fit refuses it; ``oldest`` is when
    each budget's earliest counted call was made."""
    for check in checks:
        if used.get(check.budget_id, Decimal(0)) + check.amount > check.limit:
            return ReserveOutcome(
                reserved=False,
                used=dict(used),
                refused_by=check.budget_id,
                oldest=oldest.get(check.budget_id),
            )
    return ReserveOutcome(reserved=True, used=dict(used))
