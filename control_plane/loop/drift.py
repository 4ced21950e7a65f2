"""Latency drift: merge data planes' feedback and decide which pairs to refit, by how much.

PURE: no clock or I/O. Observations are ratios observed / predicted (`contracts.latency_feedback`)
against the table the data planes routed on, each prediction made for the tokens the engine
reported and the load the request met, so at the table's quantile q a correct table reads
about 1 in every load x size cell. A cell with `min_cell_samples` counts; it reads slower when
even its ratio at q - e (e = `outlier_share`) is above 1 + t, faster when even its ratio at
q + e(1 - q) is below 1 - t: a share e of outliers, slow or fast, cannot fake that verdict
(`_edge`). A pair drifts when its counted cells hold `min_samples` and `consensus_share` of
those samples are in cells that drift the same way: a drift in one kind of request (long
answers best effort sends it, one load level) is not a slower engine. What else could explain
a consensus: the engine's host is shared with new work, or its configuration changed; either
way the table's predictions are off for every kind of request, which is what a refit corrects.

The factor per line (TTFT, TPOT) is the sample-weighted median over the agreeing cells of that
line's band-edge ratio when streams gave `min_samples` of it (1 when the line itself does not
drift), else the e2e one, blended with the current table by sample count:
factor = 1 + (ratio - 1) x n / (n + prior_samples).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
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
    NOT_BETTER = "not_better"  # a refit did not predict held-out samples better (validation.py)
    REVERTED = "reverted"  # a refit lowered budget attainment and was taken back (watch.py)
    LIFTED = "lifted"  # a demotion the fresh evidence no longer supports was lifted


@dataclass(frozen=True, slots=True)
class Cell:
    """One load x size bucket of one pair: merged ratio histograms and budget counts."""

    ttft: RatioHistogram
    tpot: RatioHistogram
    e2e: RatioHistogram
    budget_met: int = 0
    budget_missed: int = 0


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
    quantile: float = 0.95
    cells: Mapping[tuple[int, int], Cell] | None = None  # (load, size bucket) -> cell


@dataclass(frozen=True, slots=True)
class Correction:
    pair: str
    samples: int
    e2e_ratio: float
    ttft_factor: float
    tpot_factor: float
    e2e_factor: float | None = None  # the e2e ratio blended; None: between the two lines


class _Slot:
    """One cell's parts while reports are merged."""

    __slots__ = ("e2e", "met", "missed", "tpot", "ttft")

    def __init__(self) -> None:
        self.ttft: list[RatioHistogram] = []
        self.tpot: list[RatioHistogram] = []
        self.e2e: list[RatioHistogram] = []
        self.met = self.missed = 0

    def cell(self) -> Cell:
        return Cell(
            merge_histograms(self.ttft),
            merge_histograms(self.tpot),
            merge_histograms(self.e2e),
            self.met,
            self.missed,
        )


def merge_feedback(
    reports: Iterable[LatencyFeedback], version: int, quantile: float
) -> dict[str, PairDrift]:
    """pair -> drift over the reports about table `version` (others are ignored: their
    predictions came from another table)."""
    found: dict[str, dict[tuple[int, int], _Slot]] = {}
    for report in reports:
        if report.table_version != version:
            continue
        for c in report.cells:
            slot = found.setdefault(c.pair, {}).setdefault((c.load_bucket, c.size_bucket), _Slot())
            slot.ttft.append(c.ttft)
            slot.tpot.append(c.tpot)
            slot.e2e.append(c.e2e)
            slot.met += c.budget_met
            slot.missed += c.budget_missed
    return {
        pair: _pair_drift(pair, {k: s.cell() for k, s in sorted(raw.items())}, quantile)
        for pair, raw in sorted(found.items())
    }


def _pair_drift(pair: str, cells: Mapping[tuple[int, int], Cell], q: float) -> PairDrift:
    ttft = merge_histograms(c.ttft for c in cells.values())
    tpot = merge_histograms(c.tpot for c in cells.values())
    e2e = merge_histograms(c.e2e for c in cells.values())
    by_load: dict[int, list[RatioHistogram]] = {}
    for (load, _), cell in cells.items():
        by_load.setdefault(load, []).append(cell.e2e)
    per_load = {b: merge_histograms(hs).quantile(q) for b, hs in sorted(by_load.items())}
    return PairDrift(
        pair=pair,
        samples=e2e.n,
        e2e_ratio=e2e.quantile(q),
        ttft_ratio=ttft.quantile(q),
        ttft_samples=ttft.n,
        tpot_ratio=tpot.quantile(q),
        tpot_samples=tpot.n,
        e2e_ratio_by_load={b: r for b, r in per_load.items() if r is not None},
        quantile=q,
        cells=cells,
    )


def _blend(ratio: float, samples: int, prior: int) -> float:
    return 1.0 + (ratio - 1.0) * samples / (samples + prior)


def _edge(h: RatioHistogram, q: float, direction: int, policy: RefitPolicy) -> float | None:
    """The ratio at the band edge a share e of outliers cannot fake: q - e for slower (+1;
    with the slowest e set aside, the rest's q-quantile is at q(1 - e) >= q - e), q + e(1 - q)
    for faster (-1; with the fastest e set aside, the rest's q-quantile is at q + e(1 - q)).
    q + e, clipped at 0.999, read the slowest sample whenever q + e >= 1 (q 0.95, e 0.1): one
    hiccup in hundreds blocked a pair's refit back for the whole window."""
    e = policy.outlier_share
    at = q - e if direction > 0 else q + e * (1.0 - q)
    return h.quantile(min(max(at, 0.01), 0.999))


def _cell_direction(h: RatioHistogram, q: float, policy: RefitPolicy) -> int:
    """+1 slower, -1 faster, 0 neither (robustly, see the module docstring)."""
    t = policy.drift_threshold_ratio
    slow, fast = _edge(h, q, 1, policy), _edge(h, q, -1, policy)
    if slow is not None and slow > 1.0 + t:
        return 1
    if fast is not None and fast < 1.0 - t:
        return -1
    return 0


def min_cell(policy: RefitPolicy) -> int:
    return min(policy.min_cell_samples, policy.min_samples)


def direction(drift: PairDrift, policy: RefitPolicy) -> int:
    """+1 when the pair drifts slower, -1 faster, 0 when it does not drift."""
    counted = {k: c for k, c in (drift.cells or {}).items() if c.e2e.n >= min_cell(policy)}
    total = sum(c.e2e.n for c in counted.values())
    if total < policy.min_samples:
        return 0
    for way in (1, -1):
        agreeing = sum(
            c.e2e.n
            for c in counted.values()
            if _cell_direction(c.e2e, drift.quantile, policy) == way
        )
        if agreeing >= policy.consensus_share * total:
            return way
    return 0


def pooled_direction(drift: PairDrift, policy: RefitPolicy, samples: int) -> int:
    """+1 / -1 / 0 as one cell of all the pair's answers pooled reads, with at least `samples`
    of them (0 with fewer): coarser than `direction`, for as many answers as the watch judges."""
    e2e = merge_histograms(c.e2e for c in (drift.cells or {}).values())
    return _cell_direction(e2e, drift.quantile, policy) if e2e.n >= samples else 0


def drifting(drift: PairDrift, policy: RefitPolicy) -> bool:
    """Enough counted samples, and a consensus of their cells drifting one way."""
    return direction(drift, policy) != 0


def _weighted_median(values: Sequence[tuple[float, int]]) -> float | None:
    ordered = sorted(values)
    total = sum(n for _, n in ordered)
    seen = 0
    for value, n in ordered:
        seen += n
        if seen * 2 >= total:
            return value
    return None


def _line_ratio(
    cells: Sequence[Cell], line: str, q: float, way: int, policy: RefitPolicy
) -> tuple[float | None, int]:
    """(the line's weighted-median band-edge ratio over `cells`, its samples); the ratio is
    1 where the line itself does not drift `way`."""
    edges = []
    for cell in cells:
        h: RatioHistogram = getattr(cell, line)
        edge = _edge(h, q, way, policy) if h.n >= min_cell(policy) else None
        if edge is not None:
            moved = _cell_direction(h, q, policy) == way
            edges.append((edge if moved or line == "e2e" else 1.0, h.n))
    return _weighted_median(edges), sum(n for _, n in edges)


def correction_for(drift: PairDrift, way: int, policy: RefitPolicy) -> Correction | None:
    """The correction of `drift` in direction `way` from the cells that drift that way; None
    when none does."""
    q = drift.quantile
    agreeing = [
        c
        for c in (drift.cells or {}).values()
        if c.e2e.n >= min_cell(policy) and _cell_direction(c.e2e, q, policy) == way
    ]
    e2e, n = _line_ratio(agreeing, "e2e", q, way, policy)
    if e2e is None or n == 0:
        return None
    prior = policy.prior_samples

    def factor(line: str) -> float:
        ratio, samples = _line_ratio(agreeing, line, q, way, policy)
        own = ratio if ratio is not None and samples >= policy.min_samples else e2e
        return _blend(own, n, prior)

    return Correction(
        pair=drift.pair,
        samples=n,
        e2e_ratio=e2e,
        ttft_factor=factor("ttft"),
        tpot_factor=factor("tpot"),
        e2e_factor=_blend(e2e, n, prior),
    )


def plan_corrections(drifts: Mapping[str, PairDrift], policy: RefitPolicy) -> list[Correction]:
    """The corrections of the drifting pairs, in pair order (empty: nothing to refit)."""
    found = []
    for drift in drifts.values():
        way = direction(drift, policy)
        correction = correction_for(drift, way, policy) if way else None
        if correction is not None:
            found.append(correction)
    return found


def log_error(cells: Iterable[Cell], q: float, factor: float, policy: RefitPolicy) -> float:
    """Sample-weighted mean |log(observed / predicted)| at quantile q over the counted cells,
    for predictions scaled by `factor` (1: the table as it is); NaN when no cell counts."""
    total, weighted = 0, 0.0
    for cell in cells:
        ratio = cell.e2e.quantile(q) if cell.e2e.n >= min_cell(policy) else None
        if ratio is None:
            continue
        total += cell.e2e.n
        weighted += cell.e2e.n * abs(math.log(ratio / factor))
    return weighted / total if total else math.nan
