"""Per-pair counters since start that the live state reports to the operator page.

Plain attributes bumped on the event loop where delivery and the attempt walk already account
(no labels, no locks, no I/O); `sync/live_state` copies them into `DataPlaneState.pairs` every
few seconds. Observed end-to-end latency is kept as a sum and as observed / predicted ratios in
the fixed log-spaced buckets of `contracts.latency_feedback`, so memory stays bounded.
"""

from __future__ import annotations

from typing import Protocol

from contracts.latency_feedback import ratio_bucket
from contracts.live_state import PairCounters
from data_plane.domain import Candidate
from data_plane.telemetry.feedback import predicted_lines


class Tokens(Protocol):
    """Prompt and completion tokens of one answer (`serving.usage.Usage`)."""

    @property
    def input_tokens(self) -> int: ...
    @property
    def output_tokens(self) -> int: ...


def predicted_e2e_s(cand: Candidate, usage: Tokens, load_met: float = 0.0) -> float:
    """The candidate's end-to-end prediction for the tokens the answer counted (prompt and
    completion; answers often stop before max_tokens) at the load it met, as the latency
    feedback compares it: the decision's load, or `load_met` where that is larger (requests
    that joined the endpoint after it, `serving.lifecycle.Request.load_met`)."""
    load = max(cand.load, load_met)
    ttft_s, tpot_s = predicted_lines(cand.pair, load, usage.input_tokens)
    return ttft_s + usage.output_tokens * tpot_s


class PairTotals:
    """One pair's counters since this process started."""

    __slots__ = (
        "baseline_cost_usd",
        "budget_met",
        "budget_missed",
        "cost_usd",
        "errors",
        "family",
        "fleet_baseline_cost_usd",
        "latency_n",
        "latency_sum_s",
        "predicted_sum_s",
        "ratio_counts",
        "requests",
        "retries",
    )

    def __init__(self, family: str) -> None:
        self.family = family
        self.requests = 0
        self.budget_met = 0
        self.budget_missed = 0
        self.errors = 0
        self.retries = 0
        self.cost_usd = 0.0
        self.baseline_cost_usd = 0.0
        self.fleet_baseline_cost_usd = 0.0
        self.latency_n = 0
        self.latency_sum_s = 0.0
        self.predicted_sum_s = 0.0
        self.ratio_counts: dict[int, int] = {}

    def answered(self, latency_s: float, predicted_s: float, budget_s: float | None) -> None:
        """One answer served in `latency_s` against `predicted_s` (the prediction for the
        tokens produced) and the request's budget, when it had one."""
        self.requests += 1
        if budget_s is not None:
            if latency_s <= budget_s:
                self.budget_met += 1
            else:
                self.budget_missed += 1
        if predicted_s > 0.0 and latency_s >= 0.0:
            self.latency_n += 1
            self.latency_sum_s += latency_s
            self.predicted_sum_s += predicted_s
            bucket = ratio_bucket(latency_s / predicted_s)
            self.ratio_counts[bucket] = self.ratio_counts.get(bucket, 0) + 1

    def costed(self, cost: float, baseline: float | None, fleet_baseline: float | None) -> None:
        """One answer paid for; a missing baseline counts the answer's own cost (no saving)."""
        self.cost_usd += cost
        self.baseline_cost_usd += cost if baseline is None else baseline
        self.fleet_baseline_cost_usd += cost if fleet_baseline is None else fleet_baseline

    def snapshot(self) -> PairCounters:
        return PairCounters(
            family=self.family,
            requests=self.requests,
            budget_met=self.budget_met,
            budget_missed=self.budget_missed,
            errors=self.errors,
            retries=self.retries,
            cost_usd=self.cost_usd,
            baseline_cost_usd=self.baseline_cost_usd,
            fleet_baseline_cost_usd=self.fleet_baseline_cost_usd,
            latency_n=self.latency_n,
            latency_sum_s=self.latency_sum_s,
            predicted_sum_s=self.predicted_sum_s,
            ratio_counts=dict(self.ratio_counts),
        )
