"""The CPU one served request spends on metric updates, with `telemetry/series.py`'s children
and with plain prometheus_client metrics (the A/B variant's `PlainExposition`).

An end-to-end A/B row cannot resolve a few microseconds in a few hundred on a shared machine;
this measures just the updates a non-streaming request makes (decision, attempt, in-flight,
per-pair latency, budget, cost, tokens, request), in process CPU time, alternating the two
kinds over several rounds and keeping each one's median.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass

from bench.common.dp_variant import PlainExposition
from bench.common.stats import median_low
from data_plane.telemetry.metrics import DataPlaneMetrics, RequestOutcome, Route

PAIR, ENDPOINT = "llama-3.1-8b-instruct@fp8", "llama-3.1-8b-instruct@fp8#0"


@dataclass(frozen=True, slots=True)
class MetricCost:
    series_us: float  # per request, telemetry/series.py
    prometheus_client_us: float  # per request, prometheus_client's own metrics
    requests: int
    rounds: int


def one_request(m: DataPlaneMetrics) -> None:
    """The updates of one routed, non-streaming request that succeeds on its first attempt."""
    m.decision_duration.observe(1.2e-5)
    m.count_decision(PAIR, "cheapest_feasible", "chat", 0.4)
    m.pair(PAIR).predicted.observe(0.8)
    m.observe_attempt(ENDPOINT, "ok", 0.01)
    series = m.pair(PAIR)
    series.ttfb.observe(0.005)
    series.latency.observe(0.01)
    series.budget_met.inc()
    series.cost.inc(1e-5)
    series.baseline_cost.inc(2e-5)
    series.tokens_in.inc(100)
    series.tokens_out.inc(30)
    m.observe_request(Route.CHAT_COMPLETIONS, RequestOutcome.OK, 0.011)


def _us_per_request(m: DataPlaneMetrics, n: int) -> float:
    gc.disable()
    try:
        started = time.process_time()
        for _ in range(n):
            one_request(m)
        return (time.process_time() - started) / n * 1e6
    finally:
        gc.enable()


def measure_metric_cost(requests: int = 50_000, rounds: int = 5) -> MetricCost:
    ours = DataPlaneMetrics("bench", "bench")
    plain = DataPlaneMetrics("bench", "bench", PlainExposition())
    for m in (ours, plain):  # label children created, caches warm
        _us_per_request(m, 1000)
    timings: dict[int, list[float]] = {id(ours): [], id(plain): []}
    for _ in range(rounds):
        for m in (ours, plain):
            timings[id(m)].append(_us_per_request(m, requests))
    return MetricCost(
        median_low(timings[id(ours)]), median_low(timings[id(plain)]), requests, rounds
    )


def metric_cost_note(cost: MetricCost) -> str:
    saved = cost.prometheus_client_us - cost.series_us
    return (
        f"metric updates of one request (median of {cost.rounds} x {cost.requests:,}, process "
        f"CPU time): series.py {cost.series_us:.2f} µs, plain prometheus_client "
        f"{cost.prometheus_client_us:.2f} µs ({saved:+.2f} µs per request for series.py)"
    )
