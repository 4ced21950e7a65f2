"""Latency drift: merge data planes' feedback and decide which pairs to refit, by how much.

PURE: no clock or I/O. Observations are ratios observed / predicted (`contracts.latency_feedback`)
against the table the data planes routed on, so at the table's quantile q a correct table
reads about 1. A pair drifts when, with at least `min_samples` end-to-end observations in
the window, its e2e ratio at q leaves [1 - t, 1 + t]. Its refit factor per line (TTFT, TPOT)
is that line's own ratio when streams gave `min_samples` of it, else the e2e ratio, blended
with the current table by sample count: factor = 1 + (ratio - 1) x n / (n + prior_samples).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from contracts.latency_feedback import LatencyFeedback, RatioHistogram, merge_histograms
from contracts.policy import RefitPolicy


class RefitCheck(StrEnum):
    """Outcome of one check (the `outcome` label of gearbox_cp_refit_checks_total)."""

    PUBLISHED = "published"
    NO_DRIFT = "no_drift"
    DISABLED = "disabled"
    PINNED = "pinned"
    RATE_LIMITED = "rate_limited"
    NO_TABLE = "no_table"
    FAILED = "failed"
    DEMOTED = "demoted"  # an accuracy demotion was published (accuracy_drift.py)


@dataclass(frozen=True, slots=True)
class PairDrift:
    """One pair's merged observations in the window (ratios at the table quantile)."""

    pair: str
    samples: int  # end-to-end observations
    e2e_ratio: float | None
    ttft_ratio: float | None
    ttft_samples: int
    tpot_ratio: float | None
    tpot_samples: int
    e2e_ratio_by_load: Mapping[int, float]  # load bucket -> e2e ratio


@dataclass(frozen=True, slots=True)
class Correction:
    pair: str
    samples: int
    e2e_ratio: float
    ttft_factor: float
    tpot_factor: float


def merge_feedback(
    reports: Iterable[LatencyFeedback], version: int, quantile: float
) -> dict[str, PairDrift]:
    """pair -> drift over the reports about table `version` (others are ignored: their
    predictions came from another table)."""
    cells: dict[str, dict[int, list[RatioHistogram]]] = {}
    for report in reports:
        if report.table_version != version:
            continue
        for cell in report.cells:
            by_load = cells.setdefault(cell.pair, {})
            found = by_load.setdefault(cell.load_bucket, [])
            found += [cell.ttft, cell.tpot, cell.e2e]
    result = {}
    for pair, by_load in sorted(cells.items()):
        ttft = merge_histograms(h for hs in by_load.values() for h in hs[0::3])
        tpot = merge_histograms(h for hs in by_load.values() for h in hs[1::3])
        e2e = merge_histograms(h for hs in by_load.values() for h in hs[2::3])
        per_load = {b: merge_histograms(hs[2::3]).quantile(quantile) for b, hs in by_load.items()}
        result[pair] = PairDrift(
            pair=pair,
            samples=e2e.n,
            e2e_ratio=e2e.quantile(quantile),
            ttft_ratio=ttft.quantile(quantile),
            ttft_samples=ttft.n,
            tpot_ratio=tpot.quantile(quantile),
            tpot_samples=tpot.n,
            e2e_ratio_by_load={b: r for b, r in sorted(per_load.items()) if r is not None},
        )
    return result


def _blend(ratio: float, samples: int, prior: int) -> float:
    return 1.0 + (ratio - 1.0) * samples / (samples + prior)


def drifting(drift: PairDrift, policy: RefitPolicy) -> bool:
    """Enough samples, and the e2e ratio at the quantile outside [1 - t, 1 + t]."""
    ratio = drift.e2e_ratio
    if ratio is None or drift.samples < policy.min_samples:
        return False
    return abs(ratio - 1.0) > policy.drift_threshold_ratio


def plan_corrections(drifts: Mapping[str, PairDrift], policy: RefitPolicy) -> list[Correction]:
    """The corrections of the drifting pairs, in pair order (empty: nothing to refit)."""
    found = []
    for drift in drifts.values():
        if not drifting(drift, policy) or drift.e2e_ratio is None:
            continue
        e2e = drift.e2e_ratio

        def own(ratio: float | None, n: int, fallback: float = e2e) -> float:
            return ratio if ratio is not None and n >= policy.min_samples else fallback

        n, prior = drift.samples, policy.prior_samples
        found.append(
            Correction(
                pair=drift.pair,
                samples=n,
                e2e_ratio=e2e,
                ttft_factor=_blend(own(drift.ttft_ratio, drift.ttft_samples), n, prior),
                tpot_factor=_blend(own(drift.tpot_ratio, drift.tpot_samples), n, prior),
            )
        )
    return found
