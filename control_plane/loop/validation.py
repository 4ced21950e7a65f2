"""Held-out validation of a refit: it is published only if it predicts better than the table
it replaces, on samples it was not computed from.

PURE. The window's reports about the current table are split into two folds by their order
in the stream (alternate reports: interleaved windows of every replica). For each corrected
pair, a correction is computed from one fold alone (same direction, same rules as the live
one, `drift.correction_for`) and judged on the other: the sample-weighted mean |log(observed /
predicted)| at the table's quantile over the other fold's counted cells, with and without the
factor. A pair is refit only when both folds' corrections beat the current table on the other
fold; a fold without counted cells of the pair gives no evidence, so that pair is not refit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from contracts.latency_feedback import LatencyFeedback
from contracts.policy import RefitPolicy
from control_plane.loop.drift import Correction, correction_for, log_error, merge_feedback, min_cell


class Rejection(StrEnum):
    """Why a pair's refit was not published (the `reason` of gearbox_cp_refits_rejected_total)."""

    HELD_OUT_WORSE = "held_out_worse"
    TOO_FEW_HELD_OUT = "too_few_held_out"


@dataclass(frozen=True, slots=True)
class Rejected:
    pair: str
    reason: Rejection
    detail: str  # words for the log, e.g. "held-out error 0.31 >= 0.12 (table as it is)"


def _folds(reports: Sequence[LatencyFeedback], version: int) -> tuple[list[LatencyFeedback], ...]:
    about = [r for r in reports if r.table_version == version]
    return about[0::2], about[1::2]


def _judge(
    correction: Correction,
    train: Sequence[LatencyFeedback],
    test: Sequence[LatencyFeedback],
    version: int,
    quantile: float,
    policy: RefitPolicy,
) -> tuple[float, float] | None:
    """(held-out error of the table, of the fold's correction); None without evidence."""
    way = 1 if correction.e2e_ratio > 1.0 else -1
    fitted = merge_feedback(train, version, quantile).get(correction.pair)
    held_out = merge_feedback(test, version, quantile).get(correction.pair)
    counted = [] if fitted is None else list((fitted.cells or {}).values())
    if not any(c.e2e.n >= min_cell(policy) for c in counted) or held_out is None:
        return None
    fold = None if fitted is None else correction_for(fitted, way, policy)
    # A fold whose own cells do not drift that way corrects nothing: factor 1.
    factor = 1.0
    if fold is not None:
        factor = fold.e2e_factor or (fold.ttft_factor * fold.tpot_factor) ** 0.5
    cells = (held_out.cells or {}).values()
    old, new = log_error(cells, quantile, 1.0, policy), log_error(cells, quantile, factor, policy)
    if math.isnan(old) or math.isnan(new):  # no counted cell held out
        return None
    return old, new


def validate(
    corrections: Sequence[Correction],
    reports: Sequence[LatencyFeedback],
    version: int,
    quantile: float,
    policy: RefitPolicy,
) -> tuple[list[Correction], list[Rejected]]:
    """(the corrections that predict both held-out folds better, the ones that do not)."""
    first, second = _folds(reports, version)
    kept, rejected = [], []
    for c in corrections:
        judged = [
            _judge(c, train, test, version, quantile, policy)
            for train, test in ((first, second), (second, first))
        ]
        if any(j is None for j in judged):
            detail = f"a fold of the window has no cell with {min_cell(policy)} samples"
            rejected.append(Rejected(c.pair, Rejection.TOO_FEW_HELD_OUT, detail))
            continue
        worse = [(old, new) for old, new in (j for j in judged if j is not None) if new >= old]
        if worse:
            old, new = worse[0]
            detail = f"held-out error {new:.3f} >= {old:.3f} (the table as it is)"
            rejected.append(Rejected(c.pair, Rejection.HELD_OUT_WORSE, detail))
            continue
        kept.append(c)
    return kept, rejected
