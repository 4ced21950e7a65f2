"""Evidence where it moves traffic, for the admin API (`GET /v1/evidence`) and the operator page.

PURE over the current table and the data planes' feedback reports of the refit window (the
window `operator_loop` and the refit loop read): their decision counts per (category, floor,
chosen pair) are the recent mix (`contracts.latency_feedback.MixCell`), the table's counts,
bounds and prices are the evidence, `contracts.evidence` does the arithmetic
(docs/accuracy.md, "Evidence where it moves traffic").
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from contracts.evidence import PairAccuracy, evidence, merge_mix
from contracts.latency_feedback import LatencyFeedback, MixCell
from contracts.routing_table import RoutingTable

MAX_ROWS = 50  # undecided rows shown, most traffic-moving first


class _View(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class EvidenceRowView(_View):
    pair: str
    category: str
    right: int
    n: int
    bound: float = Field(description="the bound the table routes on")
    upper: float = Field(description="the one-sided upper bound at the same confidence")
    floors: list[float] = Field(description="floors of the mix (and the policy's) it leaves open")
    requests_moved: int = Field(description="requests of the window deciding it would move")
    share_moved: float = Field(description="their share of the window's requests")
    usd_per_day: float | None = Field(description="served cost minus this pair's, per day")
    items_needed: int | None = Field(description="more eval items; null: over 100,000")
    likely_pass: bool = Field(description="today's rate meets the highest floor with traffic")


class EvidenceView(_View):
    table_version: int | None
    window_s: float = Field(description="seconds of feedback the mix covers")
    requests: int = Field(description="decisions in the window, over every data plane")
    provable_share: float = Field(description="requests whose floor some pair's bound meets")
    decidable_share: float = Field(description="... or could meet with more eval items")
    proven_share: float = Field(description="requests decided under the table's guarantee")
    rows: list[EvidenceRowView]
    mix: list[MixCell] = Field(description="the recent mix (profiler --traffic reads it)")


def table_accuracy(table: RoutingTable) -> list[PairAccuracy]:
    """Each (pair, category) of the table with counts, bound and prices."""
    return [
        PairAccuracy(
            pair=e.pair,
            category=category,
            right=e.accuracy_right.get(category, round(e.accuracy[category] * n)),
            n=n,
            bound=e.accuracy_bound.get(category, e.accuracy[category]),
            input_usd_per_mtok=e.input_usd_per_mtok,
            output_usd_per_mtok=e.output_usd_per_mtok,
        )
        for e in table.entries
        for category, n in sorted(e.accuracy_n.items())
    ]


def _window_s(reports: Sequence[LatencyFeedback], now: datetime, window_s: float) -> float:
    starts = [r.window_start for r in reports if r.mix]
    if not starts:
        return window_s
    return max(1.0, min(window_s, (now - min(starts)).total_seconds()))


def evidence_view(
    table: RoutingTable | None,
    reports: Sequence[LatencyFeedback],
    now: datetime,
    window_s: float,
) -> EvidenceView:
    """The provable share of the window's mix and the undecided rows that would move it."""
    mix = merge_mix(cell for r in reports for cell in r.mix)
    covered = _window_s(reports, now, window_s)
    if table is None:
        total = sum(c.requests for c in mix)
        return EvidenceView(
            table_version=None,
            window_s=covered,
            requests=total,
            provable_share=0.0,
            decidable_share=0.0,
            proven_share=0.0,
            rows=[],
            mix=mix,
        )
    policy = table.policy
    floors = {c: p.min_accuracy for c, p in policy.categories.items()}
    found = evidence(
        table_accuracy(table),
        mix,
        floors,
        policy.floor_confidence,
        policy.min_eval_items,
        covered,
    )
    rows = [
        EvidenceRowView(
            pair=r.pair,
            category=r.category,
            right=r.right,
            n=r.n,
            bound=r.bound,
            upper=r.upper,
            floors=list(r.floors),
            requests_moved=r.requests_moved,
            share_moved=r.share_moved,
            usd_per_day=r.usd_per_day,
            items_needed=r.items_needed,
            likely_pass=r.likely_pass,
        )
        for r in found.rows[:MAX_ROWS]
    ]
    return EvidenceView(
        table_version=table.version,
        window_s=covered,
        requests=found.requests,
        provable_share=found.provable_share,
        decidable_share=found.decidable_share,
        proven_share=found.proven_share,
        rows=rows,
        mix=mix,
    )
