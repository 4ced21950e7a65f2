"""Finishing a request: sending the answer, the give-up error, and the per-pair accounting.

Accounting covers latency and budget attainment, first byte, fallbacks, and cost from the
answer's `usage` next to what the family's baseline pair would have cost.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from data_plane.domain import Candidate, CompiledTable
from data_plane.errors import (
    AllUpstreamsUnavailable,
    DeadlineExceeded,
    Overloaded,
    RouterError,
    UpstreamError,
    normalize_upstream_error,
)
from data_plane.outcome import (
    BudgetMissed,
    ConnectFailed,
    ResponseTooLarge,
    Timeout,
    UpstreamStatus,
)
from data_plane.request.tenant import ANONYMOUS
from data_plane.resilience.output_length import OutputLengths
from data_plane.resilience.overshoot import Overshoot
from data_plane.serving.attempt import Failed, stream_error_event
from data_plane.serving.usage import Usage, cost_usd
from data_plane.serving.walk import Answer, RequestWalk
from data_plane.telemetry.feedback import FeedbackAggregator
from data_plane.telemetry.metrics import DataPlaneMetrics, RequestOutcome
from data_plane.telemetry.pair_totals import predicted_e2e_s
from data_plane.telemetry.traffic import TrafficStats

logger = logging.getLogger(__name__)


def give_up_error(failure: Failed | None, attempts: int, retry_after_s: float) -> RouterError:
    """The client error after the last failed attempt (never upstream 4xx: those pass through)."""
    if failure is None:
        return AllUpstreamsUnavailable(
            "every endpoint of the feasible pairs is ejected by its breaker",
            retry_after_s=retry_after_s,
        )
    match failure.outcome:
        case UpstreamStatus(code=429):
            return Overloaded("the engines are overloaded (HTTP 429)", retry_after_s=1.0)
        case UpstreamStatus(code=code):
            return UpstreamError(f"the engine answered HTTP {code} ({attempts} attempt(s))")
        case BudgetMissed():
            return DeadlineExceeded(
                f"no first token within the TTFT budget ({attempts} attempt(s))"
            )
        case Timeout(phase="first_byte"):
            return DeadlineExceeded(
                f"no engine made progress within its own pace ({attempts} attempt(s))"
            )
        case Timeout(phase="gap"):
            return UpstreamError(
                f"the engine went silent mid-answer, past its own pace ({attempts} attempt(s))"
            )
        case ResponseTooLarge(part=part, limit_bytes=limit):
            return UpstreamError(
                f"the engine's response {part} exceeded {limit} bytes ({attempts} attempt(s))"
            )
        case ConnectFailed() | Timeout(phase="connect"):
            return AllUpstreamsUnavailable(
                f"no engine could be reached ({attempts} attempt(s))", retry_after_s=retry_after_s
            )
        case _:
            return UpstreamError("the engine's answer broke off before it was complete")


class Delivery:
    """Sends answers and errors through the sink and accounts served requests."""

    def __init__(
        self,
        metrics: DataPlaneMetrics,
        traffic: TrafficStats,
        clock: Callable[[], float],
        feedback: FeedbackAggregator | None = None,
        overshoot: Overshoot | None = None,
        outputs: OutputLengths | None = None,
    ) -> None:
        self._metrics = metrics
        self._traffic = traffic
        self._clock = clock
        self._feedback = feedback
        self._overshoot = overshoot
        self._outputs = outputs  # how long answers run, per tenant, family and category

    def attempted(self, cand: Candidate, retry: bool, failed: bool) -> None:
        """One engine attempt on `cand`'s pair (counted for the operator page's error and
        retry rates; the Prometheus series count attempts by endpoint and reason)."""
        self._traffic.attempted(cand.pair.pair, cand.pair.family, retry, failed)

    async def deliver(self, walk: RequestWalk, answer: Answer) -> RequestOutcome:
        """Send a non-streamed answer (streams are already out), then account it."""
        served = answer.served
        outcome = RequestOutcome.OK if served.outcome is None else RequestOutcome.STREAM_ERROR
        if served.streamed:
            self._account(walk, answer, served.first_byte_s)
            return outcome
        headers = {
            "Content-Type": served.content_type or "application/json",
            **walk.request.headers_for(answer.cand, walk.request.attempts),
        }
        try:
            await walk.sink.send(served.status, headers, served.body)
        finally:  # accounted even when the client left meanwhile: the engine's work was done
            self._account(walk, answer, self._clock())
        return outcome

    async def give_up(self, walk: RequestWalk, retry_after_s: float) -> RequestOutcome:
        """Pass an engine's 4xx through (normalised envelope); raise for everything else."""
        state = walk.request  # where the walk stands
        failure, attempts = state.failure, state.attempts
        match failure:
            case Failed(outcome=UpstreamStatus(code=code)) if code < 500 and code != 429:
                last = state.last or walk.request.walked.candidates[0]
                body = json.dumps(normalize_upstream_error(code, failure.body)).encode()
                route = walk.request.headers_for(last, attempts)
                headers = {"Content-Type": "application/json", **route}
                await walk.sink.send(code, headers, body)
                return RequestOutcome.INVALID_REQUEST
        raise give_up_error(failure, attempts, retry_after_s)

    async def deadline_in_stream(self, walk: RequestWalk) -> RequestOutcome:
        """The budget ran out after the first byte: one SSE error event ends the stream."""
        pair = walk.request.streaming_pair
        if pair is not None:
            self._metrics.pair(pair).stream_errors.inc()
            totals = self._traffic.pairs.get(pair)
            if totals is not None:
                totals.errors += 1
        await walk.sink.write(
            stream_error_event("the latency budget ran out mid-stream", "budget_exhausted")
        )
        await walk.sink.finish()
        return RequestOutcome.STREAM_ERROR

    def account_reask(self, walk: RequestWalk, first: Answer, reask: Answer) -> None:
        """The quality guard discarded `first` for `reask`: the discarded answer is costed on
        its own pair (it was paid for), and the re-ask's cost is counted against the pair whose
        answer was re-asked (`gearbox_quality_guard_reask_cost_usd_total`). The re-ask itself
        is accounted as the served answer by `deliver`."""
        self._cost(walk.table, first)
        self._metrics.quality_reask_cost.labels(first.cand.pair.pair).inc(reask.cost_usd)

    def _cost(self, table: CompiledTable, answer: Answer) -> Usage:
        """Cost and tokens of one answer, and what its usage would have cost on the family's
        and the fleet's baselines, and the engine's prompt tokens over our estimate
        (`request.prompt_size`); returns the usage counted."""
        pair = answer.cand.pair
        series = self._metrics.pair(pair.pair)
        usage = answer.usage
        cost = answer.cost_usd
        series.cost.inc(cost)
        baseline = table.baselines.get(pair.family)
        baseline_cost = None if baseline is None else cost_usd(baseline, usage)
        if baseline_cost is not None:
            series.baseline_cost.inc(baseline_cost)
        fleet = table.fleet_baseline
        fleet_cost = None if fleet is None else cost_usd(fleet, usage)
        if fleet_cost is not None:
            series.fleet_baseline_cost.inc(fleet_cost)
        self._traffic.pair(pair.pair, pair.family).costed(cost, baseline_cost, fleet_cost)
        series.tokens_in.inc(usage.input_tokens)
        series.tokens_out.inc(usage.output_tokens)
        found = answer.engine_usage  # the estimate's error, where the engine told its count
        estimate = answer.cand.input_tokens
        if found is not None and found.input_tokens > 0 and estimate > 0:
            series.prompt_estimate.observe(found.input_tokens / estimate)
        return usage

    def _observe(
        self,
        walk: RequestWalk,
        answer: Answer,
        timing: tuple[float, float | None],
        met: bool | None,
    ) -> None:
        """Latency feedback: only the first choice's clean answers (a fallback's latency
        includes the failed attempts before it), judged on the tokens the engine reported (an
        answer without `usage` says nothing about its engine's pace); `timing` = (latency
        from the client's arrival, monotonic time of the first byte)."""
        found = answer.engine_usage
        if found is None:
            return
        request, served = walk.request, answer.served
        latency_s, first_byte_s = timing
        client = (request.client, walk.table.policy.refit.max_client_share)
        # The engine's own time: from dispatch, not arrival (a wait in the queue is the
        # router's, and counting it would shrink the capacity that caused it).
        started_s, dispatched_s = request.started_s, request.dispatched_s
        dispatched_s = started_s if dispatched_s is None else dispatched_s
        latency_s -= dispatched_s - started_s
        if self._overshoot is not None:
            predicted_s = predicted_e2e_s(answer.cand, found, walk.request.load_met)
            self._overshoot.answered(answer.cand.pair.pair, latency_s, predicted_s, client)
        if self._outputs is not None:
            category = request.walked.category
            kind = (request.client or ANONYMOUS, answer.cand.pair.family, category)
            self._outputs.answered(kind, (found.output_tokens, request.max_tokens))
        if self._feedback is None:
            return
        ttft_s = first_byte_s - dispatched_s if served.streamed and first_byte_s else None
        self._feedback.observe(
            walk.table.version,
            answer.cand,
            (latency_s, ttft_s),
            (found.input_tokens, found.output_tokens),
            met,
            client,
        )

    def _account(self, walk: RequestWalk, answer: Answer, first_byte_s: float | None) -> None:
        request, cand, served = walk.request, answer.cand, answer.served
        decision = request.walked
        pair = cand.pair
        series = self._metrics.pair(pair.pair)
        latency_s = self._clock() - request.started_s
        if first_byte_s is not None:
            series.ttfb.observe(first_byte_s - request.started_s)
        series.latency.observe(latency_s)
        budget_s = decision.budget_latency_s  # what was left of it at dispatch
        if budget_s is not None:
            budget_s += request.waited_s  # the client's whole budget, as `latency_s` runs
        metrics, who = self._metrics, (request.tenant, request.priority)
        met = None if budget_s is None else latency_s <= budget_s
        if met is not None:
            (series.budget_met if met else series.budget_missed).inc()
            metrics.tenant_budget_outcomes.labels(*who, "met" if met else "missed").inc()
        usage = self._cost(walk.table, answer)
        metrics.tenant_cost.labels(*who).inc(answer.cost_usd)
        first = decision.candidates[0]
        fallback = cand is not first and any(c is cand for c in decision.candidates)
        if fallback:
            self._metrics.fallbacks.labels(first.pair.pair, pair.pair).inc()
        elif served.outcome is None:
            self._observe(walk, answer, (latency_s, first_byte_s), met)
        self._traffic.served(pair.pair, fallback)
        totals = self._traffic.pair(pair.pair, pair.family)
        totals.answered(latency_s, predicted_e2e_s(cand, usage), budget_s)
        totals.errors += served.outcome is not None  # broke off mid-stream
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "served",
                extra={
                    "request_id": request.id,
                    "pair": pair.pair,
                    "reason": decision.reason.value,
                    "outcome": "ok" if served.outcome is None else served.outcome.label,
                    "duration_s": round(latency_s, 6),
                },
            )
