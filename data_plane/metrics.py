"""Every Prometheus object of the data plane (docs/METRICS.md, "Data plane"), on one registry.

One `DataPlaneMetrics` per app (no global registry), so tests can build many apps. Label children
for pairs and endpoints are created once and cached, so the hot path does dict lookups only.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
DECISION_BUCKETS_S = (1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2)
SCORE_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


class Route(StrEnum):
    CHAT_COMPLETIONS = "chat_completions"
    COMPLETIONS = "completions"
    ROUTE = "route"
    MODELS = "models"
    HEALTHZ = "healthz"
    READYZ = "readyz"
    METRICS = "metrics"
    OTHER = "other"


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
    CANCELLED = "cancelled"


BREAKER_STATE_VALUE = {"closed": 0.0, "half_open": 1.0, "open": 2.0}


@dataclass(frozen=True, slots=True)
class PairSeries:
    """The label children of one pair."""

    ttfb: Histogram
    latency: Histogram
    predicted: Histogram
    budget_met: Counter
    budget_missed: Counter
    stream_errors: Counter
    shadow: Counter
    cost: Counter
    baseline_cost: Counter
    tokens_in: Counter
    tokens_out: Counter


class DataPlaneMetrics:
    """All data-plane metrics; `registry` is what `/metrics` exposes."""

    def __init__(self, version: str, git_sha: str) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        Gauge("gearbox_build_info", "Build identity", ["version", "git_sha"], registry=r).labels(
            version, git_sha
        ).set(1)
        self.requests = Counter(
            "gearbox_requests_total", "Requests answered", ["route", "outcome"], registry=r
        )
        self.request_duration = Histogram(
            "gearbox_request_duration_seconds",
            "End-to-end time in the router",
            ["route", "outcome"],
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self._pair_metrics(r)
        self._decision_metrics(r)
        self._upstream_metrics(r)
        self._table_metrics(r)
        self._request_series = {
            (route, outcome): (
                self.requests.labels(route, outcome),
                self.request_duration.labels(route, outcome),
            )
            for route in Route
            for outcome in RequestOutcome
        }
        self._pairs: dict[str, PairSeries] = {}
        self._attempts: dict[tuple[str, str], tuple[Counter, Histogram]] = {}
        self._children: dict[tuple[object, ...], Counter | Gauge | Histogram] = {}

    def _pair_metrics(self, r: CollectorRegistry) -> None:
        def hist(name: str, doc: str) -> Histogram:
            return Histogram(name, doc, ["pair"], buckets=LATENCY_BUCKETS_S, registry=r)

        self.ttfb = hist("gearbox_time_to_first_byte_seconds", "Time to first byte to client")
        self.pair_latency = hist("gearbox_pair_latency_seconds", "Observed latency per pair")
        self.predicted_latency = hist(
            "gearbox_predicted_latency_seconds", "Predicted latency at decision time"
        )
        self.budget_outcomes = Counter(
            "gearbox_budget_outcomes_total",
            "Latency budget attainment of served requests",
            ["pair", "outcome"],
            registry=r,
        )
        self.stream_errors = Counter(
            "gearbox_stream_errors_total",
            "Streams broken after the first byte",
            ["pair"],
            registry=r,
        )
        self.shadow_decisions = Counter(
            "gearbox_shadow_decisions_total",
            "Shadow mode: pair the router would pick",
            ["pair"],
            registry=r,
        )
        self.cost = Counter(
            "gearbox_cost_usd_total", "Cost of served requests", ["pair"], registry=r
        )
        self.baseline_cost = Counter(
            "gearbox_baseline_cost_usd_total", "Cost on the family baseline", ["pair"], registry=r
        )
        self.tokens = Counter(
            "gearbox_tokens_total", "Tokens from usage", ["pair", "kind"], registry=r
        )
        self.quality_escalations = Counter(
            "gearbox_quality_guard_escalations_total",
            "Answers re-asked on a more precise pair",
            ["pair", "reason"],
            registry=r,
        )
        self.fallbacks = Counter(
            "gearbox_fallbacks_total",
            "Requests served by a later candidate",
            ["from_pair", "to_pair"],
            registry=r,
        )

    def _decision_metrics(self, r: CollectorRegistry) -> None:
        self.decision_duration = Histogram(
            "gearbox_routing_decision_duration_seconds",
            "choose_route time",
            buckets=DECISION_BUCKETS_S,
            registry=r,
        )
        self.decisions = Counter(
            "gearbox_routing_decisions_total",
            "First-choice pair per decision",
            ["pair", "reason"],
            registry=r,
        )
        self.no_route = Counter(
            "gearbox_no_route_total", "Decisions with no feasible route", ["reason"], registry=r
        )
        self.complexity = Histogram(
            "gearbox_complexity_score",
            "Classifier complexity score",
            ["category"],
            buckets=SCORE_BUCKETS,
            registry=r,
        )

    def _upstream_metrics(self, r: CollectorRegistry) -> None:
        self.attempts = Counter(
            "gearbox_upstream_attempts_total",
            "Attempts to engines",
            ["endpoint", "outcome"],
            registry=r,
        )
        self.attempt_duration = Histogram(
            "gearbox_upstream_request_duration_seconds",
            "Attempt duration",
            ["endpoint", "outcome"],
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.retries = Counter(
            "gearbox_retries_total", "Retries and fallbacks taken", ["reason"], registry=r
        )
        self.retry_budget_exhausted = Counter(
            "gearbox_retry_budget_exhausted_total",
            "Retries refused by the retry budget",
            registry=r,
        )
        self.circuit_state = Gauge(
            "gearbox_circuit_state", "0 closed, 1 half-open, 2 open", ["endpoint"], registry=r
        )
        self.circuit_transitions = Counter(
            "gearbox_circuit_transitions_total",
            "Breaker transitions",
            ["endpoint", "to"],
            registry=r,
        )
        self.in_flight = Gauge(
            "gearbox_in_flight_requests",
            "Requests in flight from this process",
            ["endpoint"],
            registry=r,
        )
        self.queue_depth = Gauge(
            "gearbox_engine_queue_depth",
            "Scraped engine waiting + running",
            ["endpoint"],
            registry=r,
        )

    def _table_metrics(self, r: CollectorRegistry) -> None:
        self.table_version = Gauge(
            "gearbox_routing_table_version", "Routing table version being served", registry=r
        )
        self.table_created = Gauge(
            "gearbox_routing_table_created_timestamp_seconds",
            "Creation time of the served table",
            registry=r,
        )
        self.table_last_load = Gauge(
            "gearbox_routing_table_last_load_timestamp_seconds",
            "Last successful load or check",
            registry=r,
        )
        self.table_load_failures = Counter(
            "gearbox_routing_table_load_failures_total",
            "Failed table loads",
            ["reason"],
            registry=r,
        )
        for reason in ("redis_unavailable", "invalid_table", "missing_version"):
            self.table_load_failures.labels(reason)

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

    def _child(self, metric: Counter | Gauge | Histogram, *labels: str) -> Any:
        """`metric.labels(*labels)`, cached (prometheus_client's own lookup takes a lock)."""
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def count_decision(self, pair: str, reason: str, category: str, complexity: float) -> None:
        self._child(self.decisions, pair, reason).inc()
        self._child(self.complexity, category).observe(complexity)

    def count_retry(self, reason: str) -> None:
        self._child(self.retries, reason).inc()

    def set_in_flight(self, endpoint: str, count: int) -> None:
        self._child(self.in_flight, endpoint).set(count)

    def set_breaker_state(self, endpoint: str, state: str) -> None:
        self.circuit_state.labels(endpoint).set(BREAKER_STATE_VALUE[state])
