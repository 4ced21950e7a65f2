"""Shadow re-asks: a sampled share of lower-precision answers asked again on the family's
reference pair, in the background, and the two answers compared (`agreement`).

Runs after the client has its answer and never changes or delays it: `offer` only queues
(bounded; a full queue drops the check), one worker task sends. Limited by the table policy's
`accuracy_check` (sample rate, checks per hour per process). Agreement counts go into the
latency feedback summaries (`telemetry/feedback.py`); checks and their cost are metrics.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass

from data_plane.domain import Candidate, CompiledPair, CompiledTable
from data_plane.serving.agreement import answer_text, answers_agree
from data_plane.serving.attempt import Call, Served
from data_plane.serving.usage import cost_usd, find_usage
from data_plane.telemetry.feedback import FeedbackAggregator
from data_plane.telemetry.metrics import DataPlaneMetrics
from data_plane.upstream.port import AttemptError, UpstreamClient, UpstreamRequest

logger = logging.getLogger(__name__)
QUEUE_SIZE = 64
_HOUR_S = 3600.0


@dataclass(frozen=True, slots=True)
class _Job:
    version: int
    pair: str
    category: str
    reference: CompiledPair
    url: str
    body: bytes
    answer: str


class AccuracyChecker:
    def __init__(
        self,
        upstream: UpstreamClient,
        feedback: FeedbackAggregator,
        metrics: DataPlaneMetrics,
        rng: random.Random,
        clock: Callable[[], float],
    ) -> None:
        self._upstream = upstream
        self._feedback = feedback
        self._metrics = metrics
        self._rng = rng
        self._clock = clock
        self._queue: asyncio.Queue[_Job] = asyncio.Queue(QUEUE_SIZE)
        self._hour_started = clock()
        self._this_hour = 0

    def _budget_allows(self, per_hour: int) -> bool:
        now = self._clock()
        if now - self._hour_started >= _HOUR_S:
            self._hour_started, self._this_hour = now, 0
        if self._this_hour >= per_hour:
            return False
        self._this_hour += 1
        return True

    def offer(
        self, call: Call, table: CompiledTable, category: str, cand: Candidate, served: Served
    ) -> None:
        """Maybe queue a re-ask of this served answer (never raises, never waits)."""
        policy = table.policy.accuracy_check
        reference = table.baselines.get(cand.pair.family)
        if (
            policy.sample_rate <= 0.0
            or served.streamed
            or served.status != 200
            or reference is None
            or reference.pair == cand.pair.pair
            or self._rng.random() >= policy.sample_rate
        ):
            return
        answer = answer_text(served.body)
        if answer is None or not self._budget_allows(policy.max_checks_per_hour):
            return
        job = _Job(
            table.version,
            cand.pair.pair,
            category,
            reference,
            reference.endpoints[0].url + call.path,
            call.bodies(reference.served_model_name),
            answer,
        )
        try:
            self._queue.put_nowait(job)
        except asyncio.QueueFull:
            self._metrics.accuracy_checks.labels(cand.pair.pair, category, "dropped").inc()

    async def check(self, job: _Job) -> str:
        """Re-ask `job` on its reference pair; returns the outcome counted."""
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        try:
            resp = await self._upstream.send(UpstreamRequest(job.url, job.body, headers))
            try:
                body = await resp.read()
            finally:
                resp.close()
        except AttemptError:
            body, outcome = b"", "error"
        else:
            outcome = "error" if resp.status != 200 else ""
        usage = find_usage(body)
        if usage is not None:
            self._metrics.accuracy_check_cost.labels(job.pair).inc(cost_usd(job.reference, usage))
        second = answer_text(body) if not outcome else None
        if second is None:
            outcome = "error"
        else:
            agreed = answers_agree(job.category, job.answer, second)
            outcome = "agree" if agreed else "disagree"
            self._feedback.observe_agreement(job.version, job.pair, job.category, agreed)
        self._metrics.accuracy_checks.labels(job.pair, job.category, outcome).inc()
        return outcome

    async def run(self) -> None:
        while True:
            await self.check(await self._queue.get())
