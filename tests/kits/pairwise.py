"""A small greedy all-pairs generator over boolean features, for matrix tests.

``all_pairs(names, allowed)`` returns rows (a ``dict`` of name → ``bool`` each) in
which every pair of features takes each of its four value combinations (both on,
both off, one on and the other off) in at least one row — every combination that
``allowed`` admits. ``allowed`` says whether a row may run at all (two features
that exclude each other, say); a pair combination no allowed row can hold is not
required. ``uncovered(rows, names, allowed)`` names the combinations the rows miss,
so a test checks the table it runs.

Greedy, in the manner of AETG: a candidate row starts from a combination still
missing and sets the other features one by one, in order, each to the value that
covers the most missing combinations with those already set (ties: ``False``);
of the candidates started from the first 64 missing combinations, the one that
covers the most is kept (ties: the earliest). No randomness: the table is the
same on every run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from itertools import combinations, product

__all__ = ["Row", "all_pairs", "uncovered"]

Row = dict[str, bool]
Allowed = Callable[[Mapping[str, bool]], bool]
_Combination = tuple[str, bool, str, bool]
_SEEDS = 64  # missing combinations tried as the start of each new row


def _admits(allowed: Allowed, partial: Mapping[str, bool], names: Sequence[str]) -> bool:
    """Whether some allowed row extends ``partial`` (checked exhaustively over the
    names it leaves unset: the feature lists here are small)."""
    free = [name for name in names if name not in partial]
    return any(
        allowed({**partial, **dict(zip(free, values, strict=True))})
        for values in product((False, True), repeat=len(free))
    )


def _required(names: Sequence[str], allowed: Allowed) -> list[_Combination]:
    return [
        (a, va, b, vb)
        for a, b in combinations(names, 2)
        for va, vb in product((False, True), repeat=2)
        if _admits(allowed, {a: va, b: vb}, names)
    ]


def _covers(row: Mapping[str, bool], combination: _Combination) -> bool:
    a, va, b, vb = combination
    return row.get(a) is va and row.get(b) is vb


def uncovered(
    rows: Sequence[Mapping[str, bool]], names: Sequence[str], allowed: Allowed = lambda row: True
) -> list[_Combination]:
    """The pair combinations ``allowed`` admits that no row of ``rows`` holds."""
    return [c for c in _required(names, allowed) if not any(_covers(r, c) for r in rows)]


def all_pairs(names: Sequence[str], allowed: Allowed = lambda row: True) -> list[Row]:
    """Rows covering every allowed pair combination of ``names`` (the module docstring)."""
    if len(set(names)) != len(names):
        raise ValueError(f"feature names repeat: {list(names)}")
    missing = _required(names, allowed)
    rows: list[Row] = []
    while missing:
        seeds = missing[:_SEEDS]
        built = [_grown(names, allowed, missing, seed) for seed in seeds]
        row = max(built, key=lambda r: sum(1 for c in missing if _covers(r, c)))
        if not allowed(row):  # _admits kept it extendable; a full row is checked once more
            raise AssertionError(f"the generator built a row that is not allowed: {row}")
        rows.append(row)
        missing = [c for c in missing if not _covers(row, c)]
    return rows


def _grown(
    names: Sequence[str], allowed: Allowed, missing: list[_Combination], seed: _Combination
) -> Row:
    """A row from ``seed``, each other feature set to cover the most of ``missing``."""
    a, va, b, vb = seed
    row: Row = {a: va, b: vb}
    for name in names:
        if name in row:
            continue
        scores = []
        for value in (False, True):
            candidate = {**row, name: value}
            if not _admits(allowed, candidate, names):
                continue
            gained = sum(1 for c in missing if name in (c[0], c[2]) and _covers(candidate, c))
            scores.append((gained, not value, value))
        row[name] = max(scores)[2]
    return row
