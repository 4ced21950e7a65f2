"""What the operator page shows about one routing table: pairs, scores, and the frontier.

PURE: stdlib, contracts and the scoring helpers; no I/O, clock or logging. Pruned pairs are
drawn from figures the caller derives from their profiles (`PairFigures`), or listed without
figures when their profile is gone.

Chart point of pair p in category c: x = estimated USD cost of the category's typical request
(policy reference input tokens, the category's typical output tokens), y = accuracy in c,
z = predicted latency of that request at load 1 (the table's quantile). The accuracy comes with
its interval (docs/accuracy.md): `bound` is the one-sided lower bound floors are compared with,
`upper` the one-sided upper bound at the same confidence, `n` and `right` the counts behind
them (drawn as error bars). A served pair is on the
frontier of c when no other served pair is at least as cheap, as fast and as accurate in c and
strictly better in one of the three.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from contracts.accuracy_bound import upper_bound
from contracts.names import split_pair
from contracts.routing_table import PairEntry, RoutingTable
from control_plane.build.scoring import PairFigures, category_workload

PairStatus = Literal["served", "pruned"]


class _View(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CategoryPoint(_View):
    """One pair in one category: the chart's coordinates and the table's scores."""

    cost_usd: float = Field(description="estimated cost of the category's typical request")
    latency_s: float = Field(description="predicted latency of that request at load 1")
    accuracy: float
    utility: float | None = Field(description="the table's utility score; None when pruned")
    frontier: bool
    n: int | None = Field(default=None, description="eval items behind the accuracy")
    right: int | None = Field(default=None, description="items answered right")
    bound: float | None = Field(default=None, description="lower bound floors compare with")
    upper: float | None = Field(default=None, description="upper bound, same confidence")


class PairView(_View):
    pair: str
    family: str
    quantization: str
    status: PairStatus
    dominated_by: str | None = None
    baseline: bool = False
    endpoints: list[str] = Field(description="endpoint ids (never URLs)")
    context_length: int | None = None
    input_usd_per_mtok: float | None = None
    output_usd_per_mtok: float | None = None
    price_source: str | None = None
    reference_cost_usd: float | None = None
    reference_latency_s: float | None = None
    precision_rank: int | None = None
    categories: dict[str, CategoryPoint] = Field(
        description="per category; empty for a pruned pair whose profile is gone"
    )


class TableView(_View):
    version: int
    content_sha256: str
    created_at: datetime
    latency_quantile: float
    budget_mode: str
    default_category: str
    categories: list[str]
    reference_input_tokens: int
    reference_output_tokens: int
    typical_output_tokens: dict[str, int]
    pairs: list[PairView] = Field(description="served pairs by cost, then pruned pairs")
    notes: list[str]
    floor_confidence: float = 0.9
    min_eval_items: int = 1
    fleet_baseline: str | None = None


def entry_figures(entry: PairEntry) -> PairFigures:
    """The scoring figures of a served pair, read back from its table entry."""
    return PairFigures(
        pair=entry.pair,
        family=entry.family,
        input_usd_per_mtok=entry.input_usd_per_mtok,
        output_usd_per_mtok=entry.output_usd_per_mtok,
        latency=entry.latency,
        accuracy=dict(entry.accuracy),
        context_length=entry.context_length,
        bound=dict(entry.accuracy_bound),
    )


Counts = Mapping[str, tuple[int, int]]  # category -> (right, n)


def entry_counts(entry: PairEntry) -> dict[str, tuple[int, int]]:
    """category -> (right, n) of a served pair (right from the point estimate in older tables)."""
    return {
        c: (entry.accuracy_right.get(c, round(a * entry.accuracy_n[c])), entry.accuracy_n[c])
        for c, a in entry.accuracy.items()
    }


def _interval(
    counts: Counts, fig: PairFigures, category: str, confidence: float
) -> dict[str, float | int | None]:
    measured = counts.get(category)
    bound = fig.bound.get(category)
    if measured is None:
        return {"bound": bound}
    right, n = measured
    return {"n": n, "right": right, "bound": bound, "upper": upper_bound(right, n, confidence)}


def pareto_front(points: Mapping[str, tuple[float, float, float]]) -> set[str]:
    """Names whose (cost, latency, accuracy) no other point beats: lower cost and latency and
    higher accuracy are better; a point equal to another in all three stays on the front."""

    def beats(b: tuple[float, float, float], a: tuple[float, float, float]) -> bool:
        no_worse = b[0] <= a[0] and b[1] <= a[1] and b[2] >= a[2]
        return no_worse and (b[0] < a[0] or b[1] < a[1] or b[2] > a[2])

    return {
        name
        for name, point in points.items()
        if not any(beats(other, point) for o, other in points.items() if o != name)
    }


def _coordinates(
    fig: PairFigures, table: RoutingTable, category: str
) -> tuple[float, float, float]:
    n_in, n_out = category_workload(table.policy, category)
    return (
        fig.cost_usd(n_in, n_out),
        fig.latency.latency_s(n_in, n_out, 1),
        fig.accuracy_in(category),
    )


def _points(
    fig: PairFigures,
    table: RoutingTable,
    fronts: Mapping[str, set[str]],
    utility: Mapping[str, float],
    counts: Counts,
) -> dict[str, CategoryPoint]:
    points = {}
    confidence = table.policy.floor_confidence
    for category in table.categories:
        cost, latency, accuracy = _coordinates(fig, table, category)
        points[category] = CategoryPoint(
            cost_usd=cost,
            latency_s=latency,
            accuracy=accuracy,
            utility=utility.get(category),
            frontier=fig.pair in fronts[category],
            **_interval(counts, fig, category, confidence),
        )
    return points


def _reference(fig: PairFigures, table: RoutingTable) -> tuple[float, float]:
    n_in, n_out = table.policy.reference_input_tokens, table.policy.reference_output_tokens
    return fig.cost_usd(n_in, n_out), fig.latency.latency_s(n_in, n_out, 1)


def _served(entry: PairEntry, table: RoutingTable, fronts: Mapping[str, set[str]]) -> PairView:
    fig = entry_figures(entry)
    _, latency = _reference(fig, table)
    return PairView(
        pair=entry.pair,
        family=entry.family,
        quantization=entry.quantization,
        status="served",
        baseline=table.baselines.get(entry.family) == entry.pair,
        endpoints=[e.id for e in entry.endpoints],
        context_length=entry.context_length,
        input_usd_per_mtok=entry.input_usd_per_mtok,
        output_usd_per_mtok=entry.output_usd_per_mtok,
        price_source=entry.price_source,
        reference_cost_usd=entry.reference_cost_usd,
        reference_latency_s=latency,
        precision_rank=entry.precision_rank,
        categories=_points(fig, table, fronts, entry.utility, entry_counts(entry)),
    )


def _pruned(pair: str, dominated_by: str, fig: PairFigures | None, table: RoutingTable) -> PairView:
    family, quantization = split_pair(pair)
    if fig is None:
        return PairView(
            pair=pair,
            family=family,
            quantization=quantization,
            status="pruned",
            dominated_by=dominated_by,
            endpoints=[],
            categories={},
        )
    cost, latency = _reference(fig, table)
    no_front: dict[str, set[str]] = {c: set() for c in table.categories}
    return PairView(
        pair=pair,
        family=family,
        quantization=quantization,
        status="pruned",
        dominated_by=dominated_by,
        endpoints=[],
        context_length=fig.context_length,
        input_usd_per_mtok=fig.input_usd_per_mtok,
        output_usd_per_mtok=fig.output_usd_per_mtok,
        reference_cost_usd=cost,
        reference_latency_s=latency,
        categories=_points(fig, table, no_front, {}, {}),
    )


def table_view(table: RoutingTable, pruned_figures: Mapping[str, PairFigures]) -> TableView:
    """The page's view of `table`. `pruned_figures` maps pruned pairs to their figures (from
    the profiles the table was built from); pairs missing there are listed without figures."""
    served = [entry_figures(e) for e in table.entries]
    fronts = {
        c: pareto_front({f.pair: _coordinates(f, table, c) for f in served})
        for c in table.categories
    }
    notes = [
        f"{p.pair}: pruned, but its profile changed or was deleted since this table was built"
        for p in table.pruned
        if p.pair not in pruned_figures
    ]
    policy = table.policy
    return TableView(
        version=table.version,
        content_sha256=table.content_sha256,
        created_at=table.created_at,
        latency_quantile=policy.latency_quantile,
        budget_mode=policy.budget_mode,
        default_category=policy.default_category,
        categories=list(table.categories),
        reference_input_tokens=policy.reference_input_tokens,
        reference_output_tokens=policy.reference_output_tokens,
        typical_output_tokens={c: category_workload(policy, c)[1] for c in table.categories},
        pairs=[_served(e, table, fronts) for e in table.entries]
        + [
            _pruned(p.pair, p.dominated_by, pruned_figures.get(p.pair), table) for p in table.pruned
        ],
        notes=notes,
        floor_confidence=policy.floor_confidence,
        min_eval_items=policy.min_eval_items,
        fleet_baseline=table.fleet_baseline,
    )


def pruned_sources(table: RoutingTable) -> dict[str, str]:
    """Pruned pair -> the report_sha256 it was built from (pairs without a source left out)."""
    shas = {s.pair: s.report_sha256 for s in table.sources}
    return {p.pair: shas[p.pair] for p in table.pruned if p.pair in shas}
