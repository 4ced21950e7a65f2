"""Every Prometheus object of the data plane (docs/METRICS.md, "Data plane"), on one registry.

One `DataPlaneMetrics` per app (no global registry), so tests can build many apps. Label children
for pairs and endpoints are created once and cached, so the hot path does dict lookups only;
the children are `series`' lock-free numbers, exposed through prometheus_client at scrape time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from contracts.live_state import ClassCounters
from contracts.names import KNOWN_CATEGORIES
from data_plane.telemetry.flow_metrics import FlowMetrics
from data_plane.telemetry.series import CounterChild, Exposition, Family, HistogramChild

LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
DECISION_BUCKETS_S = (1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2)
SCORE_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
# The engine's prompt tokens over our estimate (1 = exact; < 1 over-, > 1 under-estimated).
ESTIMATE_RATIO_BUCKETS = (0.25, 0.5, 0.67, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 4.0, 10.0)


class Route(StrEnum):
    CHAT_COMPLETIONS = "chat_completions"
    COMPLETIONS = "completions"
    ROUTE = "route"
    MODELS = "models"
    HEALTHZ = "healthz"
    READYZ = "readyz"
    METRICS = "metrics"
    OTHER = "other"
    MODEL = "model"  # GET /v1/models/{model}
    OPENAPI = "openapi"  # GET /openapi.json


class RequestOutcome(StrEnum):
    OK = "ok"
    INVALID_REQUEST = "invalid_request"
    UNAUTHORIZED = "unauthorized"
    NO_ROUTE = "no_route"
    BUDGET_INFEASIBLE = "budget_infeasible"
    UPSTREAM_ERROR = "upstream_error"
    UNAVAILABLE = "unavailable"
    DEADLINE_EXCEEDED = "deadline_exceeded"
    OVERLOADED = "overloaded"
    SHED = "shed"  # refused by admission before any engine was called
    CANCELLED = "cancelled"
    STREAM_ERROR = "stream_error"
    INTERNAL_ERROR = "internal_error"


class AttemptOutcome(StrEnum):
    OK = "ok"
    CONNECT_FAILED = "connect_failed"
    TIMEOUT_CONNECT = "timeout_connect"
    TIMEOUT_FIRST_BYTE = "timeout_first_byte"
    TIMEOUT_READ = "timeout_read"
    STATUS_429 = "status_429"
    STATUS_5XX = "status_5xx"
    STATUS_4XX = "status_4xx"
    STREAM_BROKEN = "stream_broken"
    RESPONSE_TOO_LARGE = "response_too_large"
    CANCELLED = "cancelled"
    TTFT_BUDGET_MISSED = "ttft_budget_missed"


@dataclass(frozen=True, slots=True)
class PairSeries:
    """The label children of one pair."""

    ttfb: HistogramChild
    latency: HistogramChild
    predicted: HistogramChild
    budget_met: CounterChild
    budget_missed: CounterChild
    stream_errors: CounterChild
    shadow: CounterChild
    cost: CounterChild
    baseline_cost: CounterChild
    tokens_in: CounterChild
    tokens_out: CounterChild
    fleet_baseline_cost: CounterChild  # what the fleet baseline would have cost
    prompt_estimate: HistogramChild  # usage.prompt_tokens / the estimate


class DataPlaneMetrics:
    """All data-plane metrics; `registry` is what `/metrics` exposes."""

    def __init__(self, version: str, git_sha: str, exposition: Exposition | None = None) -> None:
        """`exposition` builds the metric objects (default: `series`' lock-free ones; the
        benchmark's A/B row passes one that builds plain prometheus_client metrics)."""
        self.registry = CollectorRegistry(auto_describe=True)
        r = self._exposition = exposition or Exposition()
        build = r.gauge("gearbox_build_info", "Build identity", ["version", "git_sha"])
        build.labels(version, git_sha).set(1)
        self.registry.register(r)
        self.requests = r.counter(
            "gearbox_requests_total", "Requests answered", ["route", "outcome"]
        )
        self.request_duration = r.histogram(
            "gearbox_request_duration_seconds",
            "End-to-end time in the router",
            ["route", "outcome"],
            buckets=LATENCY_BUCKETS_S,
        )
        self._pair_metrics(r)
        self._decision_metrics(r)
        self._upstream_metrics(r)
        self._table_metrics(r)
        self._telemetry_metrics(r)
        self._accuracy_check_metrics(r)
        self._fleet_metrics(r)
        self._request_series = {
            (route, outcome): (
                self.requests.labels(route, outcome),
                self.request_duration.labels(route, outcome),
            )
            for route in Route
            for outcome in RequestOutcome
        }
        self._pairs: dict[str, PairSeries] = {}
        self._attempts: dict[tuple[str, str], tuple[CounterChild, HistogramChild]] = {}
        self._reliability_metrics(r)
        self._demand_metrics(r)
        self._category_metrics(r)
        self._tenant_metrics(r)
        self.flow = FlowMetrics(r)

    def _pair_metrics(self, r: Exposition) -> None:
        def hist(name: str, doc: str) -> Family[HistogramChild]:
            return r.histogram(name, doc, ["pair"], buckets=LATENCY_BUCKETS_S)

        self.ttfb = hist("gearbox_time_to_first_byte_seconds", "Time to first byte to client")
        self.pair_latency = hist("gearbox_pair_latency_seconds", "Observed latency per pair")
        self.predicted_latency = hist(
            "gearbox_predicted_latency_seconds", "Predicted latency at decision time"
        )
        self.budget_outcomes = r.counter(
            "gearbox_budget_outcomes_total",
            "Latency budget attainment of served requests",
            ["pair", "outcome"],
        )
        self.stream_errors = r.counter(
            "gearbox_stream_errors_total",
            "Streams broken after the first byte",
            ["pair"],
        )
        self.shadow_decisions = r.counter(
            "gearbox_shadow_decisions_total",
            "Shadow mode: pair the router would pick",
            ["pair"],
        )
        self.cost = r.counter("gearbox_cost_usd_total", "Cost of served requests", ["pair"])
        self.baseline_cost = r.counter(
            "gearbox_baseline_cost_usd_total", "Cost on the family baseline", ["pair"]
        )
        self.tokens = r.counter("gearbox_tokens_total", "Tokens from usage", ["pair", "kind"])
        self.prompt_estimate = r.histogram(
            "gearbox_prompt_estimate_ratio",
            "Engine-reported prompt tokens over the router's estimate",
            ["pair"],
            buckets=ESTIMATE_RATIO_BUCKETS,
        )
        self.quality_escalations = r.counter(
            "gearbox_quality_guard_escalations_total",
            "Answers re-asked on a more precise pair",
            ["pair", "reason"],
        )
        self.fallbacks = r.counter(
            "gearbox_fallbacks_total",
            "Requests served by a later candidate",
            ["from_pair", "to_pair"],
        )

    def _decision_metrics(self, r: Exposition) -> None:
        self.decision_duration = r.histogram(
            "gearbox_routing_decision_duration_seconds",
            "choose_route time",
            buckets=DECISION_BUCKETS_S,
        )
        self.decisions = r.counter(
            "gearbox_routing_decisions_total",
            "First-choice pair per decision",
            ["pair", "reason"],
        )
        self.no_route = r.counter(
            "gearbox_no_route_total", "Decisions with no feasible route", ["reason"]
        )
        self.complexity = r.histogram(
            "gearbox_complexity_score",
            "Classifier complexity score",
            ["category"],
            buckets=SCORE_BUCKETS,
        )

    def _upstream_metrics(self, r: Exposition) -> None:
        self.attempts = r.counter(
            "gearbox_upstream_attempts_total",
            "Attempts to engines",
            ["endpoint", "outcome"],
        )
        self.attempt_duration = r.histogram(
            "gearbox_upstream_request_duration_seconds",
            "Attempt duration",
            ["endpoint", "outcome"],
            buckets=LATENCY_BUCKETS_S,
        )
        self.retries = r.counter("gearbox_retries_total", "Retries and fallbacks taken", ["reason"])
        self.instance_id_clashes = r.counter(
            "gearbox_instance_id_clashes_total",
            "Messages from another process carrying this replica's instance id",
        )
        self.retry_budget_exhausted = r.counter(
            "gearbox_retry_budget_exhausted_total",
            "Retries refused by the retry budget",
        )
        self.circuit_state = r.gauge(
            "gearbox_circuit_state", "0 closed, 1 half-open, 2 open", ["endpoint"]
        )
        self.circuit_transitions = r.counter(
            "gearbox_circuit_transitions_total",
            "Breaker transitions",
            ["endpoint", "to"],
        )
        self.in_flight = r.gauge(
            "gearbox_in_flight_requests",
            "Requests in flight from this process",
            ["endpoint"],
        )
        self.queue_depth = r.gauge(
            "gearbox_engine_queue_depth",
            "Scraped engine waiting + running",
            ["endpoint"],
        )
        self.scrape_errors = r.counter(
            "gearbox_engine_scrape_errors_total",
            "Engine /metrics pages refused for breaking a bound (scrape and stall probe)",
            ["reason"],
        )
        for reason in ("too_large", "too_many_series"):  # sync.metrics_page.REFUSAL_REASONS
            self.scrape_errors.labels(reason)

    def _table_metrics(self, r: Exposition) -> None:
        self.table_version = r.gauge(
            "gearbox_routing_table_version", "Routing table version being served"
        )
        self.table_created = r.gauge(
            "gearbox_routing_table_created_timestamp_seconds",
            "Creation time of the served table",
        )
        self.table_last_load = r.gauge(
            "gearbox_routing_table_last_load_timestamp_seconds",
            "Last successful load or check",
        )
        self.table_load_failures = r.counter(
            "gearbox_routing_table_load_failures_total",
            "Failed table loads",
            ["reason"],
        )
        for reason in ("redis_unavailable", "invalid_table", "missing_version"):
            self.table_load_failures.labels(reason)

    def _reliability_metrics(self, r: Exposition) -> None:
        self.quality_reask_cost = r.counter(
            "gearbox_quality_guard_reask_cost_usd_total",
            "Cost of quality-guard re-asks, by the pair whose answer was re-asked",
            ["pair"],
        )

    def _telemetry_metrics(self, r: Exposition) -> None:
        self.spans_dropped = r.counter(
            "gearbox_spans_dropped_total",
            "Ended spans that were not exported",
            ["reason"],
        )
        for reason in ("unencodable", "queue_full", "export_failed"):
            self.spans_dropped.labels(reason)

    def _accuracy_check_metrics(self, r: Exposition) -> None:
        self.accuracy_checks = r.counter(
            "gearbox_accuracy_checks_total",
            "Accuracy checks of a pair's answers against its reference pair",
            ["pair", "category", "outcome"],
        )
        self.accuracy_check_cost = r.counter(
            "gearbox_accuracy_check_cost_usd_total",
            "Cost of the accuracy checks' re-asks (the asked pairs' prices)",
            ["pair"],
        )
        self.canary_items = r.counter(
            "gearbox_canary_items_total",
            "Canary items (held-out items with known answers) sent to a pair, by outcome",
            ["pair", "category", "outcome"],
        )
        self.canary_cost = r.counter(
            "gearbox_canary_cost_usd_total",
            "Cost of the canary items sent to a pair (its prices, from the answers' usage)",
            ["pair"],
        )

    # --- cached children for the hot path --------------------------------------------------

    def observe_request(self, route: Route, outcome: RequestOutcome, duration_s: float) -> None:
        counter, hist = self._request_series[(route, outcome)]
        counter.inc()
        hist.observe(duration_s)

    def pair(self, pair: str) -> PairSeries:
        """The label children of `pair` (created on first use, then cached)."""
        series = self._pairs.get(pair)
        if series is None:
            series = PairSeries(
                ttfb=self.ttfb.labels(pair),
                latency=self.pair_latency.labels(pair),
                predicted=self.predicted_latency.labels(pair),
                budget_met=self.budget_outcomes.labels(pair, "met"),
                budget_missed=self.budget_outcomes.labels(pair, "missed"),
                stream_errors=self.stream_errors.labels(pair),
                shadow=self.shadow_decisions.labels(pair),
                cost=self.cost.labels(pair),
                baseline_cost=self.baseline_cost.labels(pair),
                tokens_in=self.tokens.labels(pair, "input"),
                tokens_out=self.tokens.labels(pair, "output"),
                fleet_baseline_cost=self.fleet_baseline_cost.labels(pair),
                prompt_estimate=self.prompt_estimate.labels(pair),
            )
            self._pairs[pair] = series
        return series

    def observe_attempt(self, endpoint: str, outcome: str, duration_s: float) -> None:
        """Count one attempt; `outcome` is an AttemptOutcome value (retry.py labels)."""
        key = (endpoint, outcome)
        series = self._attempts.get(key)
        if series is None:
            series = (
                self.attempts.labels(endpoint, outcome),
                self.attempt_duration.labels(endpoint, outcome),
            )
            self._attempts[key] = series
        series[0].inc()
        series[1].observe(duration_s)

    def count_decision(self, pair: str, reason: str, category: str, complexity: float) -> None:
        self.decisions.labels(pair, reason).inc()
        self.complexity.labels(category).observe(complexity)

    def count_retry(self, reason: str) -> None:
        self.retries.labels(reason).inc()

    def watch_in_flight(self, source: Callable[[], Mapping[str, int]]) -> None:
        """Set the in-flight gauges from `source` (endpoint -> requests in flight) at every
        scrape: the load tracker counts every request, the gauge needs the count only when
        read."""

        def refresh() -> None:
            for endpoint, count in source().items():
                self.in_flight.labels(endpoint).set(count)

        self._exposition.before_collect.append(refresh)

    def set_breaker_state(self, endpoint: str, level: int) -> None:
        """`level`: `BreakerState.level` (0 closed, 1 half-open, 2 open)."""
        self.circuit_state.labels(endpoint).set(level)

    def count_dropped_spans(self, reason: str, count: int) -> None:
        """Spans the trace pipeline did not export (counted on the event loop)."""
        self.spans_dropped.labels(reason).inc(count)

    # --- autoscaling (docs/METRICS.md, "Autoscaling") -----------------------------------------

    def _demand_metrics(self, r: Exposition) -> None:
        self.pair_spilled = r.counter(
            "gearbox_pair_spilled_total",
            "Requests that wanted this pair but went elsewhere because it was loaded",
            ["pair"],
        )
        self._demand_source: Callable[[], Iterable[PairDemand]] = tuple
        self.registry.register(_DemandCollector(lambda: self._demand_source()))

    def watch_demand(self, source: Callable[[], Iterable[PairDemand]]) -> None:
        """Read `source` at every scrape for the per-pair demand gauges."""
        self._demand_source = source

    def watch_pairs(self, pairs: Iterable[str]) -> None:
        """Every pair of a new table has its spilled counter, at 0 until a request spills."""
        for pair in pairs:
            self.pair_spilled.labels(pair)

    def _category_metrics(self, r: Exposition) -> None:
        self.category_abstentions = r.counter(
            "gearbox_category_abstentions_total",
            "Requests the category classifier was unsure about, by the category routed under",
            ["routed_as"],
        )
        for category in KNOWN_CATEGORIES:  # a table's own categories appear on first use
            self.category_abstentions.labels(category)

    def count_abstention(self, routed_as: str) -> None:
        """One request routed under the strictest plausible category (docs/classifier.md)."""
        self.category_abstentions.labels(routed_as).inc()

    # --- tenants and priorities (docs/METRICS.md, "Tenants and priorities") -----------------

    def _tenant_metrics(self, r: Exposition) -> None:
        """Tenant labels are bounded (`telemetry.tenants`); priorities are the policy's."""
        self.tenant_requests = r.counter(
            "gearbox_tenant_requests_total", "Requests decided", ["tenant", "priority"]
        )
        self.tenant_shed = r.counter(
            "gearbox_tenant_shed_total",
            "Requests shed (429 router_overloaded)",
            ["tenant", "priority"],
        )
        self._tenants: dict[tuple[str, str], tuple[CounterChild, CounterChild]] = {}
        self.tenant_budget_outcomes = r.counter(
            "gearbox_tenant_budget_outcomes_total",
            "Latency budget attainment of served requests",
            ["tenant", "priority", "outcome"],
        )
        self.tenant_cost = r.counter(
            "gearbox_tenant_cost_usd_total", "Cost of served requests", ["tenant", "priority"]
        )

    def tenant(self, tenant: str, priority: str) -> tuple[CounterChild, CounterChild]:
        """(requests, shed) children of a tenant label and priority class, both created on
        its first request (its shed count at 0 until one is shed)."""
        key = (tenant, priority)
        series = self._tenants.get(key)
        if series is None:
            series = (self.tenant_requests.labels(*key), self.tenant_shed.labels(*key))
            self._tenants[key] = series
            self.flow.touch(*key)
        return series

    def tenant_totals(self) -> tuple[dict[str, ClassCounters], dict[str, ClassCounters]]:
        """(per tenant label, per priority class) totals of the tenant counters since start,
        for the live state the operator page reads."""
        rows: dict[tuple[str, str], dict[str, float]] = {}
        families = (
            (self.tenant_requests, "requests"),
            (self.tenant_shed, "shed"),
            (self.tenant_cost, "cost_usd"),
        )
        for family, field in families:
            for key, value in _values(family):
                row = rows.setdefault((key[0], key[1]), {})
                row[field] = row.get(field, 0.0) + value
        for key, value in _values(self.tenant_budget_outcomes):
            row = rows.setdefault((key[0], key[1]), {})
            field = "budget_met" if key[2] == "met" else "budget_missed"
            row[field] = row.get(field, 0.0) + value
        queued, waiting, refused = self.flow.totals()
        for pair, count in queued.items():
            row = rows.setdefault(pair, {})
            row["queued"] = row.get("queued", 0.0) + count
        by_class = _totals(rows, 1)
        for name in waiting.keys() | refused.keys():
            now = {"waiting": waiting.get(name, 0), "queue_refused": refused.get(name, {})}
            by_class[name] = by_class.get(name, ClassCounters()).model_copy(update=now)
        return _totals(rows, 0), dict(sorted(by_class.items()))

    def _fleet_metrics(self, r: Exposition) -> None:
        """Savings against the fleet-wide baseline (the most precise pair of the most
        accurate family, `RoutingTable.fleet_baseline`), beside the per-family baseline."""
        self.fleet_baseline_cost = r.counter(
            "gearbox_fleet_baseline_cost_usd_total",
            "Cost on the fleet-wide baseline pair",
            ["pair"],
        )


class PairDemand(NamedTuple):
    """One pair's autoscaling figures at scrape time (`telemetry.demand.pair_demand`)."""

    pair: str
    demand: float  # requests in flight + spilled requests that would still be running
    sustainable: float  # concurrency one replica sustains (the profile's highest measured)
    desired_replicas: float  # ceil(demand / sustainable), this process's traffic only
    utilisation: float  # demand / (sustainable * endpoints in the table)


_DEMAND_GAUGES = (
    ("gearbox_pair_demand_concurrency", "Requests in flight at the pair plus spilled ones"),
    ("gearbox_pair_sustainable_concurrency", "Concurrency one replica of the pair sustains"),
    ("gearbox_pair_desired_replicas", "Replicas this process's demand needs"),
    ("gearbox_pair_utilisation_ratio", "Demand over the sustainable concurrency of all endpoints"),
)


class _DemandCollector(Collector):
    """The demand gauges, computed from their source when scraped (spills expire with time)."""

    def __init__(self, source: Callable[[], Iterable[PairDemand]]) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        families = [GaugeMetricFamily(n, doc, labels=["pair"]) for n, doc in _DEMAND_GAUGES]
        for row in self._source():
            values = (row.demand, row.sustainable, row.desired_replicas, row.utilisation)
            for family, value in zip(families, values, strict=True):
                family.add_metric([row.pair], value)
        yield from families


def _totals(
    rows: Mapping[tuple[str, str], Mapping[str, float]], by: int
) -> dict[str, ClassCounters]:
    """Rows keyed by (tenant, priority) summed by one of the two."""
    summed: dict[str, dict[str, float]] = {}
    for key, row in rows.items():
        into = summed.setdefault(key[by], {})
        for field, value in row.items():
            into[field] = into.get(field, 0.0) + value
    return {
        name: ClassCounters(
            requests=int(row.get("requests", 0)),
            shed=int(row.get("shed", 0)),
            budget_met=int(row.get("budget_met", 0)),
            budget_missed=int(row.get("budget_missed", 0)),
            cost_usd=row.get("cost_usd", 0.0),
            queued=int(row.get("queued", 0)),
        )
        for name, row in sorted(summed.items())
    }


def _values(family: Family[CounterChild]) -> Iterator[tuple[list[str], float]]:
    """(label values, value) of each child once (a child may sit under two keys)."""
    seen: set[int] = set()
    for key, child in family.children.items():
        if id(child) not in seen:
            seen.add(id(child))
            yield [str(v) for v in key], child.value
