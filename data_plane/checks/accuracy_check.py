"""Accuracy checks: a sampled share of lower-precision answers asked again on the family's
reference pair, in the background, and the two answers compared (`agreement`).

Runs after the client has its answer and never changes or delays it: `offer` only queues
(bounded; a full queue drops the check), one worker task sends. Only categories whose scorer
decides an answer are checked (`agreement.checked`); the re-ask is greedy, one answer, capped
at the policy's `max_tokens` (`reask`), and when the client's own request was not, the checked
pair is re-asked with the same body too. Re-asks go the way client attempts go
(`AttemptRunner`: the engine's API key, breakers, in-flight load, the endpoint's stall), and
are limited by the table policy's `accuracy_check`: sample rate, prompts of at most
`max_input_tokens`, checks per hour, and dollars per hour per process (reserved at the worst
case before queueing, settled from the answers' `usage`), and no identified client supplies
more than `refit.max_client_share` of one pair's checks, nor spends more than that share of the
hour's dollars (`check_sampling`). A pair demoted in the request's category is probed the same
way on the answers other pairs gave (its demotion took its traffic away): the sampled request
is asked on it, and on its reference unless the reference's served answer can stand, at most
once per `probe_interval_s` per pair and category. Agreement counts go into the feedback summaries
(`telemetry/feedback.py`).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from contracts.policy import AccuracyCheckPolicy
from data_plane.checks.agreement import answer_text, checked, verdict
from data_plane.checks.check_sampling import ClientShares, ClientSpend, ProbeSlots, probe_targets
from data_plane.checks.reask import Reask, reask
from data_plane.decision.choose import order_endpoints, predict
from data_plane.domain import (
    Candidate,
    CompiledEndpoint,
    CompiledPair,
    CompiledTable,
)
from data_plane.resilience.health import Health
from data_plane.serving.attempt import Attempt, AttemptLimit, AttemptRunner, Served
from data_plane.serving.lifecycle import Request
from data_plane.serving.usage import Usage, cost_usd, find_usage
from data_plane.serving.walk import Answer
from data_plane.telemetry.feedback import FeedbackAggregator
from data_plane.telemetry.metrics import DataPlaneMetrics, Route

logger = logging.getLogger(__name__)
QUEUE_SIZE = 64
_HOUR_S = 3600.0


@dataclass(frozen=True, slots=True)
class CheckerConfig:
    """A re-ask has the engine's terms, as client attempts get them
    (`AttemptRunner.engine_limit`: a stalled endpoint ends it as lack of progress), and
    `timeout_s` as its own limit, whose miss is no engine fault."""

    timeout_s: float = 30.0
    # The least time between two probes of one demoted (pair, category); 0 = no probes.
    probe_interval_s: float = 2.0
    # Told the pair whose answer disagreed (raises its canary rate; docs/accuracy.md).
    on_disagree: Callable[[str], None] | None = None


@dataclass(frozen=True, slots=True)
class CheckerParts:
    runner: AttemptRunner
    health: Health
    feedback: FeedbackAggregator
    metrics: DataPlaneMetrics
    rng: random.Random
    clock: Callable[[], float]  # monotonic seconds


@dataclass(frozen=True, slots=True)
class _Job:
    version: int
    category: str
    checked: CompiledPair
    reference: CompiledPair
    path: str
    ask: Reask
    input_chars: int
    answer: str | None  # the served answer when it stands for the checked pair's
    reserved_usd: float
    reference_answer: str | None = None  # the served answer when it stands for the reference's
    client: str | None = None  # whose request it re-asks (its spend is settled on it)


class _NoClient:
    """The sink of a re-ask: nobody waits for it (non-streamed, so never written to)."""

    started = False

    async def send(self, status: int, headers: Mapping[str, str], body: bytes) -> None:
        return None

    async def start(self, status: int, headers: Mapping[str, str]) -> None:
        return None

    async def write(self, chunk: bytes) -> None:
        return None

    async def finish(self) -> None:
        return None


class HourlyLimits:
    """Checks and dollars per clock hour (a fixed window from the first use)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._started = clock()
        self.checks = 0
        self.spent_usd = 0.0

    def reserve(self, usd: float, max_checks: int, max_usd: float) -> bool:
        if self._clock() - self._started >= _HOUR_S:
            self._started, self.checks, self.spent_usd = self._clock(), 0, 0.0
        if self.checks >= max_checks or self.spent_usd + usd > max_usd:
            return False
        self.checks += 1
        self.spent_usd += usd
        return True

    def settle(self, reserved_usd: float, spent_usd: float) -> None:
        self.spent_usd = max(0.0, self.spent_usd - reserved_usd + spent_usd)


class AccuracyChecker:
    def __init__(self, parts: CheckerParts, config: CheckerConfig) -> None:
        self._p = parts
        self._config = config
        self._queue: asyncio.Queue[_Job] = asyncio.Queue(QUEUE_SIZE)
        self.limits = HourlyLimits(parts.clock)
        self._ids = itertools.count(1)
        self.shares = ClientShares(parts.clock)
        self.spend = ClientSpend(parts.clock)
        self.probes = ProbeSlots(parts.clock, config.probe_interval_s)

    def offer(self, request: Request, answer: Answer) -> None:
        """Maybe queue a check of `request`'s served answer, and a probe of a pair demoted
        in its category (never raises, never waits); its door's `lifecycle.Finish` offers
        it once the client has it."""
        table, decision = request.table, request.decision
        cand, served = answer.cand, answer.served
        policy = table.policy.accuracy_check
        if policy.sample_rate <= 0.0 or served.status != 200 or not checked(decision.category):
            return
        if not served.streamed:
            self._offer_check(request, table, decision.category, cand, served)
        targets = probe_targets(table, decision.alias, decision.category, cand.pair.pair)
        target = self.probes.first_open(targets, decision.category) if targets else None
        if target is not None and self._p.rng.random() < policy.sample_rate:
            self._offer_probe(request, table, decision.category, (cand, served), target)

    def _offer_check(
        self, request: Request, table: CompiledTable, category: str, cand: Candidate, served: Served
    ) -> None:
        """The ordinary check: the served pair's answer against its reference's."""
        policy = table.policy.accuracy_check
        reference = table.baselines.get(cand.pair.family)
        if (
            reference is None
            or reference.pair == cand.pair.pair
            or self._p.rng.random() >= policy.sample_rate
        ):
            return
        answer = answer_text(served.body)
        ask = reask(request.bodies(cand.pair.served_model_name), policy.max_tokens)
        if answer is None or ask is None:
            return
        kept = answer if ask.reusable else None
        asked = (reference,) if ask.reusable else (reference, cand.pair)
        job = _Job(table.version, category, cand.pair, reference, request.path, ask, 0, kept, 0.0)
        self._queue_job(request, table, job, (cand, asked))

    def _offer_probe(
        self,
        request: Request,
        table: CompiledTable,
        category: str,
        answered: tuple[Candidate, Served],
        target: CompiledPair,
    ) -> None:
        """A probe of demoted `target` on this request: asked on `target`, and on its
        reference unless the reference served it with an answer that can stand."""
        cand, served = answered
        reference = table.baselines[target.family]  # probe_targets checked it is there
        cap = table.policy.accuracy_check.max_tokens
        ask = reask(request.bodies(cand.pair.served_model_name), cap)
        if ask is None:
            return
        stands = ask.reusable and not served.streamed and reference.pair == cand.pair.pair
        kept = answer_text(served.body) if stands else None
        asked = (target,) if kept is not None else (reference, target)
        job = _Job(
            table.version, category, target, reference, request.path, ask, 0, None, 0.0, kept
        )
        if self._queue_job(request, table, job, (cand, asked)):
            self.probes.take(target.pair, category)

    def _queue_job(
        self,
        request: Request,
        table: CompiledTable,
        job: _Job,
        sent: tuple[Candidate, tuple[CompiledPair, ...]],
    ) -> bool:
        """Queue `job` when its prompt is within the policy's token cap, its client has not
        had its share of the checked pair's checks nor of the hour's check dollars, and the
        hourly limits allow the re-asks of `sent` (the served candidate, the pairs to ask) at
        the cap's worst case; counts why not otherwise."""
        cand, asked = sent
        policy, pair, category = table.policy.accuracy_check, job.checked.pair, job.category
        client = request.client
        if cand.input_tokens > policy.max_input_tokens:
            self._count(pair, category, "too_long")
            return False
        chars = round(cand.input_tokens * cand.pair.chars_per_token)
        usd = sum(
            cost_usd(p, Usage(round(chars / p.chars_per_token), job.ask.max_tokens)) for p in asked
        )
        max_share = table.policy.refit.max_client_share
        if not self._admit(client, (table.version, pair, category), usd, max_share, policy):
            self._count(pair, category, "client_capped")
            return False
        if not self.limits.reserve(usd, policy.max_checks_per_hour, policy.max_usd_per_hour):
            self.spend.settle(client, usd, 0.0)
            self._count(pair, category, "over_budget")
            return False
        try:
            self._queue.put_nowait(replace(job, input_chars=chars, reserved_usd=usd, client=client))
        except asyncio.QueueFull:
            self.limits.settle(usd, 0.0)
            self.spend.settle(client, usd, 0.0)
            self._count(pair, category, "dropped")
            return False
        return True

    def _admit(
        self,
        client: str | None,
        key: tuple[int, str, str],
        usd: float,
        max_share: float,
        policy: AccuracyCheckPolicy,
    ) -> bool:
        """The client's share of the pair's checks, then of the hour's check dollars."""
        if not self.spend.reserve(client, usd, max_share * policy.max_usd_per_hour):
            return False
        if not self.shares.admit(key, client, max_share):
            self.spend.settle(client, usd, 0.0)
            return False
        return True

    def _count(self, pair: str, category: str, outcome: str) -> None:
        self._p.metrics.accuracy_checks.labels(pair, category, outcome).inc()

    async def check(self, job: _Job) -> str:
        """Ask `job` on the reference pair (unless its served answer stands for the
        reference's) and on the checked pair (unless its served answer stands for the checked
        pair's); returns the outcome counted."""
        spent = [0.0]
        second = job.reference_answer
        if second is None:
            second = await self._ask(job, job.reference, spent)
        first = job.answer
        if first is None and second is not None:
            first = await self._ask(job, job.checked, spent)
        self.limits.settle(job.reserved_usd, spent[0])
        self.spend.settle(job.client, job.reserved_usd, spent[0])
        self._p.metrics.accuracy_check_cost.labels(job.checked.pair).inc(spent[0])
        agreed = None if first is None or second is None else verdict(job.category, first, second)
        if first is None or second is None:
            outcome = "error"
        elif agreed is None:
            outcome = "undecided"
        else:
            outcome = "agree" if agreed else "disagree"
            self._p.feedback.observe_agreement(job.version, job.checked.pair, job.category, agreed)
            if not agreed and self._config.on_disagree is not None:
                self._config.on_disagree(job.checked.pair)
        self._count(job.checked.pair, job.category, outcome)
        return outcome

    def _limit(
        self, request: Request, target: Candidate, endpoint: CompiledEndpoint
    ) -> AttemptLimit:
        engine = self._p.runner.engine_limit(request, target, endpoint)
        return replace(engine, limit_s=self._config.timeout_s)

    async def _ask(self, job: _Job, pair: CompiledPair, spent: list[float]) -> str | None:
        """One re-ask on `pair` through the attempt path; its answer, None when none came
        (no endpoint the breakers allow, or the attempt failed). Adds its cost to `spent`."""
        p = self._p
        health = p.health.view()
        live = tuple(e for e in pair.endpoints if e.id not in health.open_endpoints)
        if not live:
            return None
        ordered = order_endpoints(live, health.load, p.rng)
        target = predict(pair, ordered, job.input_chars, job.ask.max_tokens, health.load)
        endpoint = next((e for e in target.endpoints if p.health.allow(e.id)), None)
        if endpoint is None:
            return None
        request = Request(f"accuracy-check-{next(self._ids)}", Route.OTHER, p.clock())
        request.sends(
            job.path,
            _NoClient(),
            job.ask.for_model,
            lambda _cand, _n: {},
            max_tokens=job.ask.max_tokens,
        )
        limit = self._limit(request, target, endpoint)
        result = await p.runner.run(request, Attempt(target, endpoint, 1, limit))
        if not isinstance(result, Served):
            return None
        usage = find_usage(result.body)
        if usage is not None:
            spent[0] += cost_usd(pair, usage)
        return answer_text(result.body)

    async def run(self) -> None:
        while True:
            job = await self._queue.get()
            try:
                await self.check(job)
            except Exception:  # a check must never end the worker
                logger.exception("accuracy check failed")
