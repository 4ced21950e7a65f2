"""The orchestrator: a decision's attempts -> answer (the only policy + I/O mix).

A request reads the table once; its decision (`decision_step.py`) gives the fallback chain,
walked one endpoint per attempt (next endpoint of the pair, then the next pair), bounded by the
attempt limit, the budget's deadline and the retry budget; retry.py decides each step. Retries
end at the first byte to the client. What one client's budget may and may not do to the
engines (and so to other clients) is in docs/reliability.md, "A client never changes what other
clients get".
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace

from data_plane.decision.choose import order_endpoints, predict
from data_plane.decision.relaxed import latency_relaxed
from data_plane.domain import (
    Candidate,
    CompiledEndpoint,
    CompiledTable,
    RouteDecision,
    RouteReason,
)
from data_plane.errors import DeadlineExceeded
from data_plane.progress.pace import output_cap
from data_plane.resilience.health import Health
from data_plane.resilience.retry import GiveUp, RetryBudget, next_step
from data_plane.serving.attempt import (
    NO_LIMIT,
    Attempt,
    AttemptLimit,
    AttemptRunner,
    Failed,
    Served,
)
from data_plane.serving.deadlines import Deadlines
from data_plane.serving.delivery import Delivery
from data_plane.serving.lifecycle import Request
from data_plane.serving.quality import Degeneracy, check_answer
from data_plane.serving.walk import Answer, RequestWalk
from data_plane.settings import ProxyConfig
from data_plane.telemetry.metrics import DataPlaneMetrics, RequestOutcome
from data_plane.telemetry.tracing import Tracing

# A re-ask ends this long before the request's deadline, leaving time to send the first answer.
REASK_MARGIN_S = 0.05


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
    # Request deadlines on one shared timer (a timer per request costs ~2 us more).
    deadlines: Deadlines = field(default_factory=Deadlines)


class _Targets:
    """A chain's (candidate, endpoint) attempts in order, built as far as they are read: a
    request answered by its first attempts never builds the rest of its chain's candidates
    (`decision.chain`: each is built on first read)."""

    __slots__ = ("_built", "_rest")

    def __init__(self, chain: Sequence[Candidate]) -> None:
        self._rest: Iterator[tuple[Candidate, CompiledEndpoint]] = (
            (cand, endpoint) for cand in chain for endpoint in cand.endpoints
        )
        self._built: list[tuple[Candidate, CompiledEndpoint]] = []

    def get(self, at: int) -> tuple[Candidate, CompiledEndpoint] | None:
        """Attempt `at` (from 0), or None past the last."""
        while len(self._built) <= at:
            target = next(self._rest, None)
            if target is None:
                return None
            self._built.append(target)
        return self._built[at]


def _reask_output(request: Request, answer: Answer) -> int:
    """Output tokens a re-ask of `answer` is predicted to write: as many as the answer it
    replaces (its `usage`; the same prompt, and a degenerate answer often ran to its bound),
    else the longest the request allows (`max_tokens`, else the context left)."""
    usage, cand = answer.served.usage, answer.cand  # read once in the attempt
    if usage is not None:
        return usage.output_tokens
    return output_cap(cand.pair, cand.input_tokens, request.max_tokens)


def _with_reason(
    headers_for: Callable[[Candidate, int], dict[str, str]], reason: RouteReason
) -> Callable[[Candidate, int], dict[str, str]]:
    """`headers_for` whose answers say `reason` in X-Route-Reason (a relaxed fallback)."""

    def relaxed_headers(cand: Candidate, attempts: int) -> dict[str, str]:
        headers = headers_for(cand, attempts)
        if cand.chance is None:  # a best-effort candidate's header says its own reason
            headers["X-Route-Reason"] = reason.value
        return headers

    return relaxed_headers


class Proxy:
    def __init__(self, config: ProxyConfig, parts: ProxyParts) -> None:
        self._config = config
        self._p = parts

    @property
    def tracing_enabled(self) -> bool:
        return self._p.tracing.enabled

    # --- serving ------------------------------------------------------------------------------

    def deadline_s(self, decision: RouteDecision) -> float:
        """Seconds the whole request may take: the latency budget plus grace; best-effort
        relaxed decisions already exceed the budget, so they get the default deadline, and
        so does shadow traffic (it behaves as it would without the router)."""
        budget = decision.budget_latency_s
        reason = decision.reason
        if budget is None or reason.startswith("best_effort") or reason is RouteReason.SHADOW:
            return self._config.default_timeout_s
        return budget + self._config.grace_s

    def attempt_limit(
        self,
        request: Request,
        decision: RouteDecision,
        cand: Candidate,
        endpoint: CompiledEndpoint,
    ) -> AttemptLimit:
        """The attempt's terms: the engine's (its allowance and gap limit from its own pace at
        its load now: `AttemptRunner.engine_limit`), and the client's TTFT budget as the
        attempt's limit while it is in force (not relaxed by best-effort). Shadow traffic gets
        none."""
        reason = decision.reason
        if reason is RouteReason.SHADOW:
            return NO_LIMIT
        engine = self._p.runner.engine_limit(request, cand, endpoint)
        client_s = None if reason.startswith("best_effort") else request.ttft_budget_s
        if client_s is None:
            return engine
        return AttemptLimit(
            client_s, engine.allowance_s, engine.load, engine.gap_s, False, engine.first_token_s
        )

    def _handover_limit(
        self,
        walk: RequestWalk,
        limit: AttemptLimit,
        targets: _Targets,
        at: int,
    ) -> AttemptLimit:
        """`limit` for target `at`, ended sooner for the client when waiting longer would
        leave the next candidate less than twice its predicted time (+ `REASK_MARGIN_S`: the
        prediction is the engine's, not the hops') before the request's deadline,
        but never before the attempt's allowance: only an attempt the engine is already
        overdue on, by its own pace, is given up for the client's sake. A missed client
        limit (`BudgetMissed`): the engine is not blamed, and its silence so far counts as
        it would have at the deadline (`progress.stall`). Only then is the attempt
        `movable`, which a stall may end; without a next candidate that fits, it waits until
        the client's own limit (a slow engine that is the only choice answers late, not 504)."""
        allowance_s = limit.allowance_s
        cand = None if allowance_s is None else self._following(walk, targets, at)
        if cand is None or allowance_s is None:
            return limit
        needed_s = cand.predicted_ttft_s if walk.request.stream else cand.predicted_latency_s
        handover_s = walk.remaining_s(self._p.clock()) - 2 * needed_s - REASK_MARGIN_S
        if handover_s < allowance_s:
            return limit
        if limit.limit_s is not None and limit.limit_s <= handover_s:
            handover_s = limit.limit_s
        return AttemptLimit(
            handover_s, allowance_s, limit.load, limit.gap_s, True, limit.first_token_s
        )

    def _following(self, walk: RequestWalk, targets: _Targets, at: int) -> Candidate | None:
        """The candidate the next attempt would go to after target `at` fails (None: none;
        endpoints whose breakers are open now are passed over, and so is everything once the
        attempt limit is reached)."""
        if walk.request.attempts >= self._config.max_attempts:
            return None
        skipped = self._p.health.view().open_endpoints
        while (target := targets.get(at := at + 1)) is not None:
            if target[1].id not in skipped:
                return target[0]
        return None

    async def serve(self, request: Request) -> RequestOutcome:
        """Answer the client through `request.sink` on its decision; raises RouterError while
        nothing was sent."""
        p = self._p
        p.retry_budget.record_request()
        decision = request.decision
        deadline_s = self.deadline_s(decision)
        deadline = p.deadlines.timeout(deadline_s)
        walk = RequestWalk(request, deadline, p.clock() + deadline_s)
        try:
            async with deadline:
                return await self._walk(walk)
        except TimeoutError as err:
            if not deadline.expired():
                raise
            if not request.sink.started:
                raise DeadlineExceeded(
                    "the latency budget ran out before an engine answered"
                ) from err
            return await p.delivery.deadline_in_stream(walk)

    async def _walk(self, walk: RequestWalk) -> RequestOutcome:
        """The decision's chain; then, for a best-effort request whose feasible pairs all
        failed, the latency-relaxed pairs (with the relaxed deadline); then give up."""
        p = self._p
        request = walk.request
        decision = request.decision
        done = await self._try_chain(walk, decision.candidates)
        if done is not None:
            return done
        may_relax = not request.stopped and self._retry_allowed(walk)
        relaxed = self._relaxed(walk.table, decision) if may_relax else None
        if relaxed is not None:
            walk.extend(self._config.default_timeout_s - self.deadline_s(decision))
            # Accounted as fallbacks from the first choice, measured against the same budget.
            request.relaxed = replace(
                relaxed, candidates=(*decision.candidates, *relaxed.candidates)
            )
            headers_for = request.headers_for
            request.headers_for = _with_reason(headers_for, relaxed.reason)
            tried = request.attempts
            done = await self._try_chain(walk, relaxed.candidates)
            if done is not None:
                return done
            if request.attempts == tried:  # the failure given up on came from the first chain
                request.headers_for = headers_for
        retry_after_s = p.health.retry_after_s()
        walk.answered()  # an engine's 4xx goes out whole, or an error is raised
        return await p.delivery.give_up(walk, retry_after_s)

    def _relaxed(self, table: CompiledTable, decision: RouteDecision) -> RouteDecision | None:
        return latency_relaxed(table, decision, self._p.health.view(), self._p.rng)

    def _retry_allowed(self, walk: RequestWalk) -> bool:
        """After a failure: may another attempt go out (retry policy, then the budget later)?"""
        failure, attempts = walk.request.failure, walk.request.attempts
        if failure is None:
            return True
        remaining_s = walk.remaining_s(self._p.clock())
        step = next_step(failure.outcome, attempts, remaining_s, self._config.max_attempts)
        return not isinstance(step, GiveUp)

    def _spend_retry(self, walk: RequestWalk, endpoint_id: str) -> bool:
        """Take a retry from the retry budget (not for a first attempt); on a refusal give
        back the half-open probe slot `allow` may have taken for `endpoint_id`."""
        p, failure = self._p, walk.request.failure
        if failure is None:
            return True
        if not p.retry_budget.try_spend():
            p.health.release_probe(endpoint_id)
            p.metrics.retry_budget_exhausted.inc()
            return False
        p.metrics.count_retry(failure.outcome.label)
        return True

    async def _try_chain(
        self, walk: RequestWalk, chain: Sequence[Candidate]
    ) -> RequestOutcome | None:
        """Walk `chain`; the outcome once an answer went out, None when nothing was served
        (`walk.request.stopped` says whether the retry policy or budget ended it)."""
        p, request = self._p, walk.request
        targets = _Targets(chain)
        at = -1
        while (target := targets.get(at := at + 1)) is not None:
            cand, endpoint = target
            if not self._retry_allowed(walk):
                request.stopped = True
                return None
            if not p.health.allow(endpoint.id):
                continue
            if not self._spend_retry(walk, endpoint.id):
                request.stopped = True
                return None
            request.attempts += 1
            request.last = cand
            limit = self.attempt_limit(request, request.walked, cand, endpoint)
            limit = self._handover_limit(walk, limit, targets, at)
            retry = request.failure is not None
            attempt = Attempt(cand, endpoint, request.attempts, limit)
            result = await p.runner.run(request, attempt)
            p.delivery.attempted(cand, retry, isinstance(result, Failed))
            if isinstance(result, Failed):
                request.failure = result
                continue
            answer = Answer(cand, result)
            if not result.streamed and cand.pair.precision_rank > 0:
                answer = await self._guard(walk, answer)
            if not answer.served.streamed:
                walk.answered()
            outcome = await p.delivery.deliver(walk, answer)
            request.answer = answer  # delivered: its door's finish offers it to the live checks
            return outcome
        return None

    def _reask_target(
        self, walk: RequestWalk, answer: Answer
    ) -> tuple[Candidate, Degeneracy] | None:
        """The more precise pair to re-ask a degenerate answer on (and what is wrong with the
        answer), or None to keep it: the answer is fine, the request is shadow traffic, the
        attempt limit is reached, the `model` field or the breakers exclude the pair, the time
        left does not cover its predicted latency, or both answers together would exceed
        X-Max-Cost-Usd. Latency and cost are predicted for an answer as long as the one re-asked
        (`_reask_output`), not the category's typical output: a long answer's re-ask that
        cannot finish in the time left would turn an answer in hand into a 504."""
        p = self._p
        cand, decision, table = answer.cand, walk.request.walked, walk.table
        better = table.more_precise.get(cand.pair.pair)
        if (
            better is None
            or decision.reason is RouteReason.SHADOW
            or walk.request.attempts >= self._config.max_attempts
            # by name: comparing CompiledPair values field by field costs ~1 us a pair
            or all(p.pair != better.pair for p in table.by_alias.get(decision.alias, ()))
        ):
            return None
        served = answer.served
        problem = check_answer(served.body, walk.request.wants_json, served.doc)
        if problem is None:
            return None
        health = p.health.view()
        live = tuple(e for e in better.endpoints if e.id not in health.open_endpoints)
        if not live:
            return None
        ordered = order_endpoints(live, health.load, p.rng)
        output = _reask_output(walk.request, answer)
        target = predict(better, ordered, decision.input_chars, output, health.load)
        if walk.remaining_s(p.clock()) < target.predicted_latency_s:
            return None
        cap = decision.max_cost_usd
        if cap is not None and answer.cost_usd + target.estimated_cost_usd > cap:
            return None
        return target, problem

    def _reask_limit(
        self, walk: RequestWalk, target: Candidate, endpoint: CompiledEndpoint
    ) -> AttemptLimit:
        """The re-ask's terms: the engine's, and as its limit the time left before the
        request's deadline (less `REASK_MARGIN_S`) when that is sooner than the client's, so a
        re-ask slower than predicted ends as a missed budget (no blame) and the answer in hand
        goes out, not a 504."""
        limit = self.attempt_limit(walk.request, walk.request.walked, target, endpoint)
        left_s = max(0.0, walk.remaining_s(self._p.clock()) - REASK_MARGIN_S)
        if limit.limit_s is not None and limit.limit_s <= left_s:
            return limit
        return replace(limit, limit_s=left_s)

    async def _guard(self, walk: RequestWalk, answer: Answer) -> Answer:
        """Quality guard: re-ask a degenerate answer ONCE on the family's next more precise
        pair (`_reask_target` says when); the re-ask spends the retry budget and counts as an
        attempt. Both answers are costed; the first is kept if the re-ask fails, including
        when it would outlast the request's deadline (`_reask_limit`)."""
        p = self._p
        found = self._reask_target(walk, answer)
        if found is None:
            return answer
        target, problem = found
        endpoint = next((e for e in target.endpoints if p.health.allow(e.id)), None)
        if endpoint is None:
            return answer
        if not p.retry_budget.try_spend():
            p.health.release_probe(endpoint.id)
            p.metrics.retry_budget_exhausted.inc()
            return answer
        p.metrics.quality_escalations.labels(answer.cand.pair.pair, problem).inc()
        walk.request.attempts += 1
        limit = self._reask_limit(walk, target, endpoint)
        attempt = Attempt(target, endpoint, walk.request.attempts, limit)
        result = await p.runner.run(walk.request, attempt)
        if isinstance(result, Served):
            reask = Answer(target, result)
            p.delivery.account_reask(walk, answer, reask)
            return reask
        return answer
