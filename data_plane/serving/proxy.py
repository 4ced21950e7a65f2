"""The orchestrator: decision -> rollout -> attempts -> answer (the only policy + I/O mix).

A request reads the table once; `choose_route` gives the fallback chain, which is walked one
endpoint per attempt (next endpoint of the pair, then the next pair), bounded by the attempt
limit, the budget's deadline and the retry budget; retry.py decides each step. Retries end at
the first byte to the client.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from data_plane.decision.choose import choose_route, order_endpoints, predict
from data_plane.decision.rollout import apply_rollout
from data_plane.domain import (
    Budget,
    Candidate,
    CompiledEndpoint,
    CompiledTable,
    NoRoute,
    NoRouteReason,
    RequestFacts,
    RouteDecision,
    RouteRequest,
)
from data_plane.errors import (
    AllUpstreamsUnavailable,
    BudgetInfeasible,
    DeadlineExceeded,
    ModelNotFound,
    RouterError,
)
from data_plane.resilience.health import Health
from data_plane.resilience.retry import GiveUp, RetryBudget, next_step
from data_plane.serving.accuracy_check import AccuracyChecker
from data_plane.serving.attempt import AttemptRunner, Call, ClientSink, Failed, Served
from data_plane.serving.delivery import Delivery
from data_plane.serving.quality import check_answer
from data_plane.telemetry.metrics import DataPlaneMetrics, RequestOutcome
from data_plane.telemetry.tracing import ATTR_PAIR, ATTR_REASON, ATTR_TABLE_VERSION, Tracing

_BINDING_PARAM = {
    "too_slow": "X-Latency-Budget-Ms",
    "below_accuracy_floor": "X-Min-Accuracy",
    "too_expensive": "X-Max-Cost-Usd",
    "context_too_long": "max_tokens",
}


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    max_attempts: int
    default_timeout_s: float  # deadline when no latency budget applies (or best-effort relaxed)
    grace_s: float  # added to the latency budget before the deadline cancels the request


@dataclass(frozen=True, slots=True)
class ProxyParts:
    runner: AttemptRunner
    delivery: Delivery
    health: Health
    retry_budget: RetryBudget
    metrics: DataPlaneMetrics
    tracing: Tracing
    clock: Callable[[], float]  # monotonic seconds
    rng: random.Random
    checker: AccuracyChecker | None = None  # shadow re-asks, after the client's answer


def no_route_error(result: NoRoute, retry_after_s: float) -> RouterError:
    """The client error for a decision with no feasible route."""
    match result.reason:
        case NoRouteReason.UNKNOWN_MODEL:
            return ModelNotFound(result.detail)
        case NoRouteReason.BUDGET_INFEASIBLE:
            param = None if result.binding is None else _BINDING_PARAM.get(result.binding)
            return BudgetInfeasible(result.detail, param=param)
        case NoRouteReason.ALL_UNHEALTHY:
            return AllUpstreamsUnavailable(result.detail, retry_after_s=retry_after_s)


class Proxy:
    def __init__(self, config: ProxyConfig, parts: ProxyParts) -> None:
        self._config = config
        self._p = parts

    # --- the decision -----------------------------------------------------------------------

    @property
    def tracing_enabled(self) -> bool:
        return self._p.tracing.enabled

    def draw(self) -> float:
        """A uniform draw in [0, 1) from the injected rng (for rollout outside `decide`)."""
        return self._p.rng.random()

    def route(
        self, table: CompiledTable, facts: RequestFacts, budget: Budget
    ) -> RouteDecision | NoRoute:
        """`choose_route` on the current health, timed into the decision histogram."""
        p = self._p
        with p.tracing.span("gearbox.route"):
            health = p.health.view()
            started = time.perf_counter()
            result = choose_route(table, RouteRequest(facts, budget), health, p.rng)
            p.metrics.decision_duration.observe(time.perf_counter() - started)
        return result

    def decide(self, table: CompiledTable, facts: RequestFacts, budget: Budget) -> RouteDecision:
        """The decision to serve (after shadow/canary), counted; raises for no route."""
        p = self._p
        result = self.route(table, facts, budget)
        if isinstance(result, NoRoute):
            p.metrics.no_route.labels(result.reason).inc()
            raise no_route_error(result, p.health.retry_after_s())
        if result.ladder is not None:  # quality-first: its hysteresis state for the next one
            p.health.set_ladder(result.ladder)
        decision = apply_rollout(result, table, p.rng.random())
        if decision.adaptive is not None:
            p.metrics.pair(decision.adaptive.candidates[0].pair.pair).shadow.inc()
        first = decision.candidates[0]
        p.metrics.count_decision(
            first.pair.pair, decision.reason, result.category, result.complexity
        )
        p.metrics.pair(first.pair.pair).predicted.observe(first.predicted_latency_s)
        span = p.tracing.current()  # the request's span, when tracing records one
        if span is not None:
            span.set_attribute(ATTR_TABLE_VERSION, table.version)
            span.set_attribute(ATTR_REASON, decision.reason.value)
            span.set_attribute(ATTR_PAIR, first.pair.pair)
        return decision

    # --- serving ------------------------------------------------------------------------------

    def deadline_s(self, decision: RouteDecision) -> float:
        """Seconds the whole request may take: the latency budget plus grace; best-effort
        relaxed decisions already exceed the budget, so they get the default deadline."""
        budget = decision.budget_latency_s
        if budget is None or decision.reason.startswith("best_effort"):  # a StrEnum is a str
            return self._config.default_timeout_s
        return budget + self._config.grace_s

    async def serve(
        self, call: Call, table: CompiledTable, decision: RouteDecision, sink: ClientSink
    ) -> RequestOutcome:
        """Answer the client through `sink`; raises RouterError while nothing was sent."""
        self._p.retry_budget.record_request()
        deadline = asyncio.timeout(self.deadline_s(decision))
        try:
            async with deadline:
                return await self._walk(call, table, decision, sink)
        except TimeoutError as err:
            if not deadline.expired():
                raise
            if not sink.started:
                raise DeadlineExceeded(
                    "the latency budget ran out before an engine answered"
                ) from err
            return await self._p.delivery.deadline_in_stream(sink, call.state.streaming_pair)

    @staticmethod
    def _targets(decision: RouteDecision) -> Iterator[tuple[Candidate, CompiledEndpoint]]:
        for cand in decision.candidates:
            for endpoint in cand.endpoints:
                yield cand, endpoint

    async def _walk(
        self, call: Call, table: CompiledTable, decision: RouteDecision, sink: ClientSink
    ) -> RequestOutcome:
        p = self._p
        deadline_at = p.clock() + self.deadline_s(decision)
        attempt = 0
        failure: Failed | None = None
        last: Candidate = decision.candidates[0]
        for cand, endpoint in self._targets(decision):
            if failure is not None:
                remaining_s = deadline_at - p.clock()
                step = next_step(failure.outcome, attempt, remaining_s, self._config.max_attempts)
                if isinstance(step, GiveUp):
                    break
            if not p.health.allow(endpoint.id):
                continue
            if failure is not None:
                if not p.retry_budget.try_spend():
                    p.metrics.retry_budget_exhausted.inc()
                    break
                p.metrics.count_retry(failure.outcome.label)
            attempt += 1
            last = cand
            result = await p.runner.run(call, cand, endpoint, attempt, sink)
            if isinstance(result, Failed):
                failure = result
                continue
            if not result.streamed and cand.pair.precision_rank > 0:
                cand, result, attempt = await self._guard(
                    call, table, decision, (cand, result, attempt), deadline_at, sink
                )
            outcome = await p.delivery.deliver(call, table, decision, cand, result, attempt, sink)
            if p.checker is not None:
                p.checker.offer(call, table, decision.category, cand, result)
            return outcome
        retry_after_s = p.health.retry_after_s()
        return await p.delivery.give_up(call, last, failure, attempt, sink, retry_after_s)

    async def _guard(
        self,
        call: Call,
        table: CompiledTable,
        decision: RouteDecision,
        answer: tuple[Candidate, Served, int],
        deadline_at: float,
        sink: ClientSink,
    ) -> tuple[Candidate, Served, int]:
        """Quality guard: re-ask a degenerate answer ONCE on the family's next more precise
        pair when the remaining time covers that pair's predicted latency; else keep it."""
        p = self._p
        cand, served, attempt = answer
        problem = check_answer(served.body, call.wants_json)
        better = table.more_precise.get(cand.pair.pair)
        if (
            problem is None
            or better is None
            or better not in table.by_alias.get(decision.alias, ())
        ):
            return answer  # fine, nothing better, or a pinned `model` that excludes it
        health = p.health.view()
        live = tuple(e for e in better.endpoints if e.id not in health.open_endpoints)
        if not live:
            return answer
        ordered = order_endpoints(live, health.load, p.rng)
        target = predict(better, ordered, decision.input_chars, cand.output_tokens, health.load)
        if deadline_at - p.clock() < target.predicted_latency_s:
            return answer
        p.metrics.quality_escalations.labels(cand.pair.pair, problem).inc()
        for endpoint in target.endpoints:
            if p.health.allow(endpoint.id):
                result = await p.runner.run(call, target, endpoint, attempt + 1, sink)
                if isinstance(result, Served):
                    return target, result, attempt + 1
                return cand, served, attempt + 1
        return answer
