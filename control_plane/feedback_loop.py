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
from collections.abc import Callable
from datetime import datetime

from pydantic import ValidationError
from redis.exceptions import RedisError

from contracts.latency_feedback import LatencyFeedback
from control_plane.drift import RefitCheck, merge_feedback, plan_corrections
from control_plane.metrics import ControlPlaneMetrics
from control_plane.publisher import PublishError, PublishOutcome
from control_plane.refit import apply_refit
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
        policy = (await self._s.policies.get()).policy.refit
        now = self._clock()
        reports = await self._reports(now.timestamp() - policy.window_s)
        drifts = merge_feedback(reports, table.version, table.policy.latency_quantile)
        self._metrics.set_drift(drifts.values())
        if not policy.enabled:
            return RefitCheck.DISABLED
        if policy.pinned_version == table.version:
            return RefitCheck.PINNED
        corrections = plan_corrections(drifts, policy)
        if not corrections:
            return RefitCheck.NO_DRIFT
        age_s = (now - table.created_at).total_seconds()
        if table.refit is not None and age_s < policy.min_interval_s:
            return RefitCheck.RATE_LIMITED
        refit = apply_refit(table, corrections, policy.window_s, now)
        result = await self._s.publisher.publish(refit)
        self._metrics.count_publish(result.outcome)
        if result.outcome is not PublishOutcome.PUBLISHED:
            return RefitCheck.NO_DRIFT
        self._metrics.last_refit.set(now.timestamp())
        self._metrics.published_version.set(result.version)
        logger.info(
            "published refit table v%s: %s",
            result.version,
            refit.refit.note if refit.refit else "",
            extra={"table_version": result.version},
        )
        return RefitCheck.PUBLISHED

    async def run(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            await self.check_once()
