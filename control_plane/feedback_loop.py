"""The refit loop: read the data planes' latency feedback, export drift, publish refit tables.

Adapter (Redis in, publisher out) around the pure `drift` and `refit` modules. Every check
reads the feedback stream's window (XRANGE by time; never per request), merges the reports
about the current table, sets the drift gauges, and, when the effective policy's `refit`
allows it (enabled, current version not pinned, the last refit older than `min_interval_s`),
publishes the refit table through the same publisher as `POST /v1/tables`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime

from pydantic import ValidationError
from redis.exceptions import RedisError

from contracts.latency_feedback import LatencyFeedback
from contracts.policy import Policy
from contracts.routing_table import RoutingTable
from control_plane.accuracy_drift import PairAgreement, demotions, merge_agreement
from control_plane.drift import PairDrift, RefitCheck, merge_feedback, plan_corrections
from control_plane.metrics import ControlPlaneMetrics
from control_plane.publisher import PublishError, PublishOutcome
from control_plane.refit import apply_demotions, apply_refit
from control_plane.services import Services
from control_plane.stored_data import StoredDataError

logger = logging.getLogger(__name__)
MAX_REPORTS = 5_000  # stream entries read per check


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
            outcome = await self._check()
        except (RedisError, OSError, StoredDataError, PublishError) as err:
            logger.warning("refit check failed: %s", type(err).__name__)
            outcome = RefitCheck.FAILED
        self._metrics.refit_checks.labels(outcome=outcome.value).inc()
        return outcome

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
        agreements = merge_agreement(reports, table)
        self._metrics.set_agreement(agreements)
        if not policy.enabled:
            return RefitCheck.DISABLED
        if policy.pinned_version == table.version:
            return RefitCheck.PINNED
        found = _next_table(table, drifts, agreements, effective, now)
        if found is None:
            return RefitCheck.NO_DRIFT
        age_s = (now - table.created_at).total_seconds()
        if table.refit is not None and age_s < policy.min_interval_s:
            return RefitCheck.RATE_LIMITED
        return await self._publish(*found, now)

    async def _publish(self, table: RoutingTable, outcome: RefitCheck, now: datetime) -> RefitCheck:
        result = await self._s.publisher.publish(table)
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
    table: RoutingTable,
    drifts: Mapping[str, PairDrift],
    agreements: Sequence[PairAgreement],
    policy: Policy,
    now: datetime,
) -> tuple[RoutingTable, RefitCheck] | None:
    """The table to publish: a latency refit first; else, with `accuracy_check.demote`, the
    accuracy demotion; None when neither is due."""
    corrections = plan_corrections(drifts, policy.refit)
    if corrections:
        return apply_refit(table, corrections, policy.refit.window_s, now), RefitCheck.PUBLISHED
    demoted = (
        demotions(agreements, policy.accuracy_check, table) if policy.accuracy_check.demote else {}
    )
    if not demoted:
        return None
    checks = sum(a.checks for a in agreements if a.pair in demoted)
    made = apply_demotions(table, demoted, checks, policy.refit.window_s, now)
    return made, RefitCheck.DEMOTED
