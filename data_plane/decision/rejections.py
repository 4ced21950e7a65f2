"""Why a decision left pairs out: one `Rejected` per pair, with the rule and operator words.

PURE. Built from what the scan kept (figures fixed at decision time) and the table alone, so
it can run long after the decision (`/v1/route`, strict-mode errors, tests) and still say
what the decision saw. Each pair gets the FIRST rule of `feasibility.RULE_ORDER` it fails.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from contracts.budget_headers import ACCURACY_HEADER, COST_HEADER, LATENCY_HEADER
from data_plane.decision.chain import FeasibleRow, candidate_of
from data_plane.decision.feasibility import Limits, first_violation, static_violation
from data_plane.domain import CompiledPair, CompiledTable, Rejected, Rejection, ScanRow


@dataclass(frozen=True, slots=True)
class RuleWords:
    """How each answer names one rule: `counted` in `/v1/route`'s summary ("3 too slow"),
    `binding` in a strict-mode error ("binding constraint: the latency budget"), and `param`,
    the header or field that error names (None for rules no request sets)."""

    counted: str
    binding: str
    param: str | None


RULE_WORDS: dict[Rejection, RuleWords] = {
    Rejection.NOT_ALLOWED: RuleWords("not allowed by the model field", "the model field", None),
    Rejection.BREAKER_OPEN: RuleWords("breaker open", "open breakers", None),
    Rejection.CONTEXT_TOO_LONG: RuleWords("context too long", "the context length", "max_tokens"),
    Rejection.BELOW_FLOOR: RuleWords(
        "below the accuracy floor", "the accuracy floor", ACCURACY_HEADER
    ),
    Rejection.TOO_SLOW: RuleWords("too slow", "the latency budget", LATENCY_HEADER),
    Rejection.TOO_EXPENSIVE: RuleWords("too expensive", "the cost ceiling", COST_HEADER),
}


def breaker_open(row: ScanRow, ejected: frozenset[str]) -> Rejected | None:
    """Rule 1 after the model field: every endpoint of the pair is ejected by its breaker."""
    if not ejected.issuperset(row.endpoint_ids):
        return None
    n = len(row.endpoints)
    return Rejected(
        row.pair.pair, Rejection.BREAKER_OPEN, f"all {n} endpoint(s) ejected by their breakers"
    )


def _explain_row(
    row: ScanRow,
    missed: FeasibleRow | None,
    limits: Limits,
    input_chars: int,
    ejected: frozenset[str],
) -> Rejected:
    """Why the scan did not keep `row`: from its figures when it was predicted (too slow or
    too expensive), else from the table (breaker, context, floor)."""
    if missed is not None:
        found = first_violation(candidate_of(missed, limits.output_tokens), limits)
    else:
        found = breaker_open(row, ejected)
        if found is None:
            tokens = math.ceil(input_chars / row.chars_per_token)
            found = static_violation(row.pair, (tokens, limits.output_tokens), limits)
    if found is None:
        raise AssertionError(f"the scan left {row.pair.pair} out without a reason")
    return found


def allowed_rejections(
    rows: tuple[ScanRow, ...],
    limits: Limits,
    input_chars: int,
    ejected: frozenset[str],
    scanned: tuple[list[FeasibleRow], list[FeasibleRow]],
) -> list[Rejected]:
    """The allowed pairs a full scan (feasible, missed) did not keep, in table order."""
    kept = {found[2] for found in scanned[0]}
    missed = {found[2]: found for found in scanned[1]}
    return [
        _explain_row(row, missed.get(row.order), limits, input_chars, ejected)
        for row in rows
        if row.order not in kept
    ]


def not_allowed(
    table: CompiledTable, allowed: tuple[CompiledPair, ...], alias: str
) -> list[Rejected]:
    """The pairs of the table that the `model` field rules out, in table order."""
    if len(allowed) == len(table.pairs):
        return []
    names = {p.pair for p in allowed}
    return [
        Rejected(p.pair, Rejection.NOT_ALLOWED, f"not served under model {alias!r}")
        for p in table.pairs
        if p.pair not in names
    ]


def all_rejections(
    table: CompiledTable,
    alias: str,
    limits: Limits,
    input_chars: int,
    ejected: frozenset[str],
    scanned: tuple[list[FeasibleRow], list[FeasibleRow]],
) -> tuple[Rejected, ...]:
    """Every pair the decision left out: the allowed ones, then those `model` excludes."""
    allowed = allowed_rejections(table.scan_rows[alias], limits, input_chars, ejected, scanned)
    return (*allowed, *not_allowed(table, table.by_alias[alias], alias))
