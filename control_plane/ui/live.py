"""Merges the live states data planes share in Redis into what the operator page shows.

PURE: no I/O, clock or logging; the caller reads the states and passes `now`. Shows endpoint
ids, never URLs (the states carry none).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict, Field

from contracts.latency_feedback import RatioHistogram
from contracts.live_state import (
    BREAKER_STATE_LEVEL,
    BreakerState,
    ClassCounters,
    DataPlaneState,
    PairCounters,
)


class _View(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class InstanceView(_View):
    instance: str
    table_version: int | None
    updated_at: datetime
    age_s: float = Field(description="seconds since the instance last wrote its state")
    stale: bool = Field(description="serves another version than the current table")
    requests_total: int
    fallbacks_total: int
    open_breakers: int


class EndpointView(_View):
    endpoint_id: str
    pair: str
    breaker: BreakerState = Field(description="the worst state any instance reports")
    breakers: dict[str, BreakerState] = Field(description="instance -> its breaker state")
    in_flight: int = Field(description="summed over instances")


class PairLiveView(_View):
    """One pair's counters summed over instances, and the rates derived from them."""

    pair: str
    family: str
    requests: int
    budget_met: int
    budget_missed: int
    budget_attainment: float | None = Field(description="met / (met + missed); None: no budget")
    errors: int
    retries: int
    error_rate: float | None = Field(description="errors per attempt; None: no attempt")
    retry_rate: float | None = Field(description="retries per answer; None: no answer")
    cost_usd: float
    baseline_cost_usd: float
    fleet_baseline_cost_usd: float
    cost_saved_usd: float = Field(description="family baseline cost - cost")
    fleet_cost_saved_usd: float = Field(description="fleet baseline cost - cost")
    observed_mean_s: float | None
    predicted_mean_s: float | None
    ratio_p50: float | None = Field(description="observed / predicted at the median")
    ratio_p95: float | None = Field(description="observed / predicted at the 95th percentile")


class CostView(_View):
    """Cost and savings summed over pairs (the fleet, or one family)."""

    requests: int
    cost_usd: float
    baseline_cost_usd: float
    fleet_baseline_cost_usd: float
    cost_saved_usd: float
    fleet_cost_saved_usd: float


class ClassLiveView(_View):
    """One tenant label or priority class, summed over instances."""

    name: str
    requests: int
    shed: int
    shed_rate: float | None = Field(description="shed / requests")
    budget_met: int
    budget_missed: int
    budget_attainment: float | None
    cost_usd: float
    queued: int = Field(default=0, description="requests that had to wait in a queue")
    waiting: int = Field(default=0, description="waiting now (priority classes)")
    queue_refused: dict[str, int] = Field(
        default_factory=dict, description="the queues' 429s per reason (priority classes)"
    )


class LiveView(_View):
    generated_at: datetime
    current_table_version: int | None
    instances: list[InstanceView]
    endpoints: list[EndpointView]
    requests_by_pair: dict[str, int] = Field(description="summed over instances, since start")
    fallbacks_total: int
    unreadable_states: int = Field(description="state documents that did not validate")
    pairs: list[PairLiveView] = Field(default_factory=list, description="per pair")
    fleet_cost: CostView | None = Field(default=None, description="all pairs")
    family_cost: dict[str, CostView] = Field(default_factory=dict, description="per family")
    tenants: list[ClassLiveView] = Field(default_factory=list, description="per tenant label")
    priorities: list[ClassLiveView] = Field(default_factory=list, description="per priority class")


def _instance(state: DataPlaneState, current: int | None, now: datetime) -> InstanceView:
    return InstanceView(
        instance=state.instance,
        table_version=state.table_version,
        updated_at=state.updated_at,
        age_s=max(0.0, (now - state.updated_at).total_seconds()),
        stale=current is not None and state.table_version != current,
        requests_total=sum(state.requests_by_pair.values()),
        fallbacks_total=state.fallbacks_total,
        open_breakers=sum(1 for e in state.endpoints if e.breaker == "open"),
    )


def _endpoints(states: Sequence[DataPlaneState]) -> list[EndpointView]:
    breakers: dict[tuple[str, str], dict[str, BreakerState]] = {}
    in_flight: dict[tuple[str, str], int] = {}
    for state in states:
        for e in state.endpoints:
            key = (e.pair, e.endpoint_id)
            breakers.setdefault(key, {})[state.instance] = e.breaker
            in_flight[key] = in_flight.get(key, 0) + e.in_flight
    return [
        EndpointView(
            endpoint_id=endpoint_id,
            pair=pair,
            breaker=max(by_instance.values(), key=BREAKER_STATE_LEVEL.__getitem__),
            breakers=dict(sorted(by_instance.items())),
            in_flight=in_flight[(pair, endpoint_id)],
        )
        for (pair, endpoint_id), by_instance in sorted(breakers.items())
    ]


_SUMMED = (
    "requests",
    "budget_met",
    "budget_missed",
    "errors",
    "retries",
    "cost_usd",
    "baseline_cost_usd",
    "fleet_baseline_cost_usd",
    "latency_n",
    "latency_sum_s",
    "predicted_sum_s",
)


def _sum_counters(counters: Sequence[PairCounters]) -> PairCounters:
    """Counters added field by field; ratio buckets added bucket by bucket."""
    totals = {name: sum(getattr(c, name) for c in counters) for name in _SUMMED}
    ratios: dict[int, int] = {}
    for c in counters:
        for bucket, n in c.ratio_counts.items():
            ratios[bucket] = ratios.get(bucket, 0) + n
    family = next((c.family for c in counters if c.family), "")
    return PairCounters(family=family, ratio_counts=ratios, **totals)


def _rate(part: float, whole: float) -> float | None:
    return part / whole if whole > 0 else None


def _pair_view(pair: str, c: PairCounters) -> PairLiveView:
    ratios = RatioHistogram(counts=c.ratio_counts)
    return PairLiveView(
        pair=pair,
        family=c.family,
        requests=c.requests,
        budget_met=c.budget_met,
        budget_missed=c.budget_missed,
        budget_attainment=_rate(c.budget_met, c.budget_met + c.budget_missed),
        errors=c.errors,
        retries=c.retries,
        # Attempts = answers + failed attempts (a broken stream is both an answer and an error).
        error_rate=_rate(c.errors, c.requests + c.errors),
        retry_rate=_rate(c.retries, c.requests),
        cost_usd=c.cost_usd,
        baseline_cost_usd=c.baseline_cost_usd,
        fleet_baseline_cost_usd=c.fleet_baseline_cost_usd,
        cost_saved_usd=c.baseline_cost_usd - c.cost_usd,
        fleet_cost_saved_usd=c.fleet_baseline_cost_usd - c.cost_usd,
        observed_mean_s=_rate(c.latency_sum_s, c.latency_n),
        predicted_mean_s=_rate(c.predicted_sum_s, c.latency_n),
        ratio_p50=ratios.quantile(0.5),
        ratio_p95=ratios.quantile(0.95),
    )


def _cost(views: Sequence[PairLiveView]) -> CostView:
    return CostView(
        requests=sum(v.requests for v in views),
        cost_usd=sum(v.cost_usd for v in views),
        baseline_cost_usd=sum(v.baseline_cost_usd for v in views),
        fleet_baseline_cost_usd=sum(v.fleet_baseline_cost_usd for v in views),
        cost_saved_usd=sum(v.cost_saved_usd for v in views),
        fleet_cost_saved_usd=sum(v.fleet_cost_saved_usd for v in views),
    )


def merge_pair_counters(states: Sequence[DataPlaneState]) -> list[PairLiveView]:
    """Per pair, every instance's counters summed (one state per instance expected)."""
    by_pair: dict[str, list[PairCounters]] = {}
    for state in states:
        for pair, counters in state.pairs.items():
            by_pair.setdefault(pair, []).append(counters)
    return [_pair_view(pair, _sum_counters(found)) for pair, found in sorted(by_pair.items())]


def merge_class_counters(rows: Sequence[Mapping[str, ClassCounters]]) -> list[ClassLiveView]:
    """Per tenant label (or priority class), every instance's counters summed."""
    summed: dict[str, list[ClassCounters]] = {}
    for row in rows:
        for name, counters in row.items():
            summed.setdefault(name, []).append(counters)
    views = []
    for name, found in sorted(summed.items()):
        requests, shed = sum(c.requests for c in found), sum(c.shed for c in found)
        met, missed = sum(c.budget_met for c in found), sum(c.budget_missed for c in found)
        views.append(
            ClassLiveView(
                name=name,
                requests=requests,
                shed=shed,
                shed_rate=_rate(shed, requests),
                budget_met=met,
                budget_missed=missed,
                budget_attainment=_rate(met, met + missed),
                cost_usd=sum(c.cost_usd for c in found),
                queued=sum(c.queued for c in found),
                waiting=sum(c.waiting for c in found),
                queue_refused=_summed(c.queue_refused for c in found),
            )
        )
    return views


def _summed(counts: Iterable[Mapping[str, int]]) -> dict[str, int]:
    """Counts per key, summed over instances."""
    out: dict[str, int] = {}
    for each in counts:
        for key, n in each.items():
            out[key] = out.get(key, 0) + n
    return dict(sorted(out.items()))


def cost_by_family(views: Sequence[PairLiveView]) -> dict[str, CostView]:
    families: dict[str, list[PairLiveView]] = {}
    for v in views:
        families.setdefault(v.family, []).append(v)
    return {family: _cost(found) for family, found in sorted(families.items())}


def _aware(state: DataPlaneState) -> DataPlaneState:
    """A writer that sent a naive timestamp meant UTC (ours always send an offset)."""
    if state.updated_at.tzinfo is not None:
        return state
    return state.model_copy(update={"updated_at": state.updated_at.replace(tzinfo=UTC)})


def merge_live_states(
    states: Sequence[DataPlaneState],
    current_version: int | None,
    now: datetime,
    unreadable: int = 0,
) -> LiveView:
    """One view over every instance: instances by name, endpoints by (pair, id), traffic summed.

    `now` must be timezone-aware (states carry aware timestamps). When two documents name the
    same instance, the newer one counts.
    """
    newest: dict[str, DataPlaneState] = {}
    for state in map(_aware, states):
        seen = newest.get(state.instance)
        if seen is None or state.updated_at > seen.updated_at:
            newest[state.instance] = state
    ordered = [newest[name] for name in sorted(newest)]
    requests: dict[str, int] = {}
    for state in ordered:
        for pair, n in state.requests_by_pair.items():
            requests[pair] = requests.get(pair, 0) + n
    pairs = merge_pair_counters(ordered)
    return LiveView(
        generated_at=now,
        current_table_version=current_version,
        instances=[_instance(s, current_version, now) for s in ordered],
        endpoints=_endpoints(ordered),
        requests_by_pair=dict(sorted(requests.items())),
        fallbacks_total=sum(s.fallbacks_total for s in ordered),
        unreadable_states=unreadable,
        pairs=pairs,
        fleet_cost=_cost(pairs) if pairs else None,
        family_cost=cost_by_family(pairs),
        tenants=merge_class_counters([s.tenants for s in ordered]),
        priorities=merge_class_counters([s.priorities for s in ordered]),
    )
