"""The refit watch: a published refit is taken back when budget attainment falls after it.

PURE. A refit is a bet that its corrected predictions route better. While the current table is
a latency refit (not a revert, not a demotion), the answers with a latency budget routed on it
are compared with those routed on the table it replaced (`refit.base_version`), both from the
feedback window: first on the refit pairs, then fleet-wide (a pair refit slower loses traffic
to others, so its own answers may be too few). When either has `watch_min_samples` answers on
both tables and attainment fell by more than `revert_drop_ratio`, the refit is reverted.
What else could explain a fall: the load rose since the base table's answers (both tables then
see it, and the revert returns to predictions that did no better), or the engines changed
again; the revert table says which refit it undid and the loop holds further refits for
`revert_hold_s`, so a true change is refit again after the hold.

The base table's answers are older: when an engine slowed while the base was current, they
are mostly from before the slowdown, and a refit that under-corrected (band edge, blend: the
pair still wins, docs/control_plane.md "Latency feedback") reads a lower attainment than the
healthy engine gave, caused by the engine, not by the refit. So a refit is kept while one of
its pairs, judged on the refit table's own answers pooled (as many as the watch needs), still
reads the way the refit corrected it: the base predicts that pair further from what its engine does
than the refit, and the loop refits it further instead (`under_corrected`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from contracts.latency_feedback import LatencyFeedback
from contracts.policy import RefitPolicy
from contracts.routing_table import RoutingTable, stamp_table
from control_plane.build.fitting import round_sig
from control_plane.loop.drift import PairDrift, pooled_direction


@dataclass(frozen=True, slots=True)
class Attainment:
    met: int
    answered: int

    @property
    def ratio(self) -> float:
        return self.met / self.answered if self.answered else 0.0


def attainment(
    reports: Iterable[LatencyFeedback], version: int, pairs: frozenset[str] | None
) -> Attainment:
    """Budget met / answered with a budget on table `version` (`pairs`: only those; None: all)."""
    met = missed = 0
    for report in reports:
        if report.table_version != version:
            continue
        for cell in report.cells:
            if pairs is None or cell.pair in pairs:
                met += cell.budget_met
                missed += cell.budget_missed
    return Attainment(met, met + missed)


def revert_reason(
    table: RoutingTable, reports: Iterable[LatencyFeedback], policy: RefitPolicy
) -> str | None:
    """Words saying why the current refit `table` should be reverted; None to keep it."""
    refit = table.refit
    if refit is None or not refit.pairs or refit.reverted_version is not None:
        return None
    found = list(reports)
    for scope, pairs in (("its pairs", frozenset(refit.pairs)), ("all pairs", None)):
        after = attainment(found, table.version, pairs)
        before = attainment(found, refit.base_version, pairs)
        enough = min(after.answered, before.answered) >= policy.watch_min_samples
        if enough and after.ratio < before.ratio - policy.revert_drop_ratio:
            return (
                f"budget attainment on {scope} fell to {after.ratio:.1%} of {after.answered} "
                f"from {before.ratio:.1%} of {before.answered} on v{refit.base_version}"
            )
    return None


def under_corrected(
    table: RoutingTable, drifts: Mapping[str, PairDrift], policy: RefitPolicy
) -> list[str]:
    """The pairs of refit `table` that, on its own answers (`drifts`, about `table.version`),
    still drift the way the refit corrected them (slower after a slower refit, faster after a
    faster one): its answers pooled, `watch_min_samples` of them as the watch itself judges
    (drift.pooled_direction: a share `outlier_share` of outliers cannot move it)."""
    refit = table.refit
    if refit is None:
        return []
    found = []
    for pair, made in sorted(refit.pairs.items()):
        way = 1 if made.observed_e2e_ratio > 1.0 else -1
        drift = drifts.get(pair)
        if drift is not None and pooled_direction(drift, policy, policy.watch_min_samples) == way:
            found.append(pair)
    return found


def apply_revert(
    base: RoutingTable, refit: RoutingTable, reason: str, window_s: float, created_at: datetime
) -> RoutingTable:
    """The base table again (version 0, to be published), saying which refit it undid."""
    data = base.model_dump(mode="python")
    kept = base.refit.demoted if base.refit is not None else {}
    samples = refit.refit.samples if refit.refit is not None else 0
    data.update(
        version=0,
        created_at=created_at,
        refit={
            "note": f"reverted refit v{refit.version}: {reason}"[:500],
            "base_version": refit.version,
            "samples": samples,
            "window_s": round_sig(window_s),
            "pairs": {},
            "demoted": kept,
            "reverted_version": refit.version,
            "slowed": dict(base.refit.slowed) if base.refit is not None else {},
        },
    )
    return stamp_table(data)
