"""The refit loop: read the data planes' latency feedback, export drift, publish refit tables.

Adapter (Redis in, publisher out) around the pure `drift`, `validation`, `watch` and `refit`
modules. Every check reads the feedback stream's window (XRANGE by time; never per request),
merges the reports about the current table, sets the drift gauges, and, when the effective
policy's `refit` allows it (enabled, current version not pinned): reverts the current refit
when budget attainment fell after it and its pairs no longer drift the way it corrected them
(`watch.py`); else publishes the refit of the pairs that
drift and whose correction predicts held-out samples better (`validation.py`), when the last
refit is older than `min_interval_s` (and a revert older than `revert_hold_s`), through the
same publisher as `POST /v1/tables`, compare-and-set on the table it was computed from: when
another table was published meanwhile, the check is recomputed on that one (at most
`PUBLISH_TRIES` times), never published over it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime

from pydantic import ValidationError
from redis.exceptions import RedisError

from contracts.latency_feedback import LatencyFeedback
from contracts.policy import Policy, RefitPolicy
from contracts.routing_table import RoutingTable
from control_plane.loop.accuracy_drift import merge_agreement
from control_plane.loop.canary_evidence import PairCanary, merge_canaries, plan_canary_demotions
from control_plane.loop.demotion import apply_demotions
from control_plane.loop.drift import PairDrift, RefitCheck, merge_feedback, plan_corrections
from control_plane.loop.refit import apply_refit
from control_plane.loop.validation import validate
from control_plane.loop.watch import apply_revert, revert_reason, under_corrected
from control_plane.runtime.metrics import ControlPlaneMetrics
from control_plane.runtime.services import Services
from control_plane.store.publisher import (
    BaseMovedError,
    PublishConflictError,
    PublishError,
    PublishOutcome,
)
from control_plane.store.stored_data import StoredDataError

logger = logging.getLogger(__name__)
MAX_REPORTS = 5_000  # stream entries read per check
PUBLISH_TRIES = 3  # recomputations when another table was published under a check


class FeedbackLoop:
    def __init__(
        self,
        services: Services,
        feedback_key: str,
        metrics: ControlPlaneMetrics,
        clock: Callable[[], datetime],
    ) -> None:
        self._s = services
        self._key = feedback_key
        self._metrics = metrics
        self._clock = clock

    async def _reports(self, since_s: float) -> list[LatencyFeedback]:
        raw = await self._s.redis.xrange(
            self._key, min=str(int(since_s * 1000)), max="+", count=MAX_REPORTS
        )
        reports = []
        for _, fields in raw or ():
            payload = (fields or {}).get(b"report")
            try:
                reports.append(LatencyFeedback.model_validate_json(payload or b""))
            except ValidationError:
                logger.debug("feedback entry skipped: invalid")
        return reports

    async def check_once(self) -> RefitCheck:
        """One check; Redis or publish failures come back as FAILED (logged), never raised."""
        try:
            outcome = await self._check_until_published()
        except (RedisError, OSError, StoredDataError, PublishError) as err:
            logger.warning("refit check failed: %s", type(err).__name__)
            outcome = RefitCheck.FAILED
        self._metrics.refit_checks.labels(outcome=outcome.value).inc()
        return outcome

    async def _check_until_published(self) -> RefitCheck:
        """`_check`, recomputed on the new current table when one was published meanwhile."""
        for _ in range(PUBLISH_TRIES - 1):
            try:
                return await self._check()
            except (BaseMovedError, PublishConflictError):
                logger.info("the current table moved under a refit check; recomputing")
        return await self._check()

    async def _check(self) -> RefitCheck:
        table = await self._s.tables.current()
        if table is None:
            return RefitCheck.NO_TABLE
        effective = (await self._s.policies.get()).policy
        policy = effective.refit
        now = self._clock()
        reports = await self._reports(now.timestamp() - policy.window_s)
        drifts = merge_feedback(reports, table.version, table.policy.latency_quantile)
        self._metrics.set_drift(drifts.values())
        confidence = effective.accuracy_check.confidence
        self._metrics.set_agreement(merge_agreement(reports, table, confidence))
        looks = effective.accuracy_check.canary_looks
        canaries = merge_canaries(reports, table, confidence, looks)
        self._metrics.set_canary(canaries)
        if not policy.enabled:
            return RefitCheck.DISABLED
        if policy.pinned_version == table.version:
            return RefitCheck.PINNED
        reverted = await self._revert(table, reports, drifts, policy, now)
        if reverted is not None:
            return reverted
        found = self._next_table(table, drifts, canaries, effective, reports, now)
        if found is None:
            return RefitCheck.NO_DRIFT
        if found[1] is RefitCheck.NOT_BETTER:
            return RefitCheck.NOT_BETTER
        age_s = (now - table.created_at).total_seconds()
        refit = table.refit
        hold_s = policy.revert_hold_s if refit and refit.reverted_version else policy.min_interval_s
        if refit is not None and age_s < hold_s:
            return RefitCheck.RATE_LIMITED
        return await self._publish(*found, now, base=table.version)

    async def _revert(
        self,
        table: RoutingTable,
        reports: Sequence[LatencyFeedback],
        drifts: Mapping[str, PairDrift],
        policy: RefitPolicy,
        now: datetime,
    ) -> RefitCheck | None:
        """Publish the base table again when the current refit lowered budget attainment
        (`watch.py`); None when it is kept: its pairs still drift the way it corrected them
        (under-corrected: refit further), or its base is no longer stored."""
        reason = revert_reason(table, reports, policy)
        if reason is None or table.refit is None:
            return None
        still = under_corrected(table, drifts, policy)
        if still:
            logger.info(
                "refit v%s kept (%s): still read the way it corrected them: %s",
                table.version,
                reason,
                ", ".join(still),
            )
            return None
        base = await self._s.tables.get(table.refit.base_version)
        if base is None:
            logger.warning("refit v%s not reverted: its base is gone (%s)", table.version, reason)
            return None
        revert = apply_revert(base, table, reason, policy.window_s, now)
        outcome = await self._publish(revert, RefitCheck.REVERTED, now, base=table.version)
        logger.warning("refit v%s reverted: %s", table.version, reason)
        return outcome

    async def _publish(
        self, table: RoutingTable, outcome: RefitCheck, now: datetime, base: int
    ) -> RefitCheck:
        result = await self._s.publisher.publish(table, base=base)
        self._metrics.count_publish(result.outcome)
        if result.outcome is not PublishOutcome.PUBLISHED:
            return RefitCheck.NO_DRIFT
        self._metrics.last_refit.set(now.timestamp())
        self._metrics.published_version.set(result.version)
        logger.info(
            "published table v%s: %s",
            result.version,
            table.refit.note if table.refit else "",
            extra={"table_version": result.version},
        )
        return outcome

    async def run(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            await self.check_once()

    def _next_table(
        self,
        table: RoutingTable,
        drifts: Mapping[str, PairDrift],
        canaries: Sequence[PairCanary],
        policy: Policy,
        reports: Sequence[LatencyFeedback],
        now: datetime,
    ) -> tuple[RoutingTable, RefitCheck] | None:
        """The table to publish: a latency refit first (its held-out validated corrections;
        NOT_BETTER with the current table when none validates); else, with
        `accuracy_check.demote`, the accuracy demotions and lifts the canary items decide
        (agreement with a reference pair never demotes by itself: docs/accuracy.md "Canary
        items"); None when neither is due."""
        planned = plan_corrections(drifts, policy.refit)
        q = table.policy.latency_quantile
        corrections, rejected = validate(planned, reports, table.version, q, policy.refit)
        for r in rejected:
            self._metrics.refits_rejected.labels(reason=r.reason.value).inc()
            logger.info("refit of %s not published: %s", r.pair, r.detail, extra={"pair": r.pair})
        if corrections:
            made = apply_refit(table, corrections, policy.refit.window_s, now)
            return made, RefitCheck.PUBLISHED
        if rejected:
            return table, RefitCheck.NOT_BETTER
        if not policy.accuracy_check.demote:
            return None
        plan = plan_canary_demotions(canaries, policy.accuracy_check)
        if not plan:
            return None
        made = apply_demotions(table, plan, policy.refit.window_s, now)
        return made, RefitCheck.DEMOTED if plan.demote else RefitCheck.LIFTED
