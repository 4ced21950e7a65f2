"""Publishing races on a real redis-server (issue 22, item 5; docs/control_plane.md
"Publishing"): a table derived from version N publishes only while N is current, and a rebuild
carries the demotions in force, even one published while it was building."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
import redis.asyncio as aioredis

from contracts.latency_feedback import CanaryCell, LatencyFeedback
from contracts.policy import AccuracyCheckPolicy, Policy, RefitPolicy
from contracts.profile_report import ProfileReport
from contracts.redis_keys import RedisKeys
from contracts.routing_table import RoutingTable
from control_plane.build.table import build_table
from control_plane.runtime.feedback_loop import FeedbackLoop
from control_plane.runtime.metrics import ControlPlaneMetrics
from control_plane.runtime.services import Services, make_services
from control_plane.runtime.table_service import TableService
from control_plane.settings import (
    BuildOptions,
    ControlPlaneSettings,
    PublisherOptions,
    RedisSettings,
)
from control_plane.store.publisher import Publisher, PublishResult
from tests.support.redis_server import RedisProcess
from tests.unit.control_plane.factories import make_report

pytestmark = pytest.mark.integration
LOW = "fam@awq-int4"
POLICY = Policy(
    accuracy_check=AccuracyCheckPolicy(sample_rate=0.5, min_checks=100, demote=True),
    refit=RefitPolicy(min_interval_s=0),
)


def _now() -> datetime:
    return datetime.now(UTC)


def _reports(low_chat: float = 0.85) -> list[ProfileReport]:
    return [
        make_report("fam", "fp16", accuracy={"math": 0.95, "chat": 0.9}),
        make_report("fam", "awq-int4", accuracy={"math": 0.9, "chat": low_chat}),
    ]


def _table(low_chat: float = 0.85) -> RoutingTable:
    return build_table(_reports(low_chat), POLICY, datetime(2026, 1, 1, tzinfo=UTC), prune=False)


class RacingPublisher(Publisher):
    """A publisher that lets a rival act (an operator's publish, a demotion) just before the
    next publish it is asked for: the race, made deterministic."""

    def __init__(self, redis: aioredis.Redis, keys: RedisKeys) -> None:
        super().__init__(redis, keys, PublisherOptions(), clock=lambda: _now().timestamp())
        self.rival: Callable[[], Awaitable[object]] | None = None

    async def publish(self, table: RoutingTable, *args: Any, **kwargs: Any) -> PublishResult:
        rival, self.rival = self.rival, None
        if rival is not None:
            await rival()
        return await super().publish(table, *args, **kwargs)


def _parts(
    redis_client: aioredis.Redis, redis_keys: RedisKeys, redis_server: RedisProcess
) -> tuple[Services, RacingPublisher, FeedbackLoop]:
    settings = ControlPlaneSettings(
        redis=RedisSettings(url=redis_server.url, key_prefix=redis_keys.prefix)
    )
    plain = make_services(redis_client, settings, _now, None)
    racing = RacingPublisher(redis_client, redis_keys)
    services = replace(plain, publisher=racing)
    loop = FeedbackLoop(services, redis_keys.feedback, ControlPlaneMetrics("test"), _now)
    return services, racing, loop


async def _low_canary(redis: aioredis.Redis, keys: RedisKeys, version: int) -> None:
    """260 of 400 math canary items right: evidence enough to demote `LOW` on `version`
    (demotions rest on canary items, docs/accuracy.md "Canary items")."""
    cell = CanaryCell(pair=LOW, category="math", n=400, right=260)
    report = LatencyFeedback(
        instance="dp", table_version=version, window_start=_now(), window_end=_now(),
        canary=(cell,),
    )  # fmt: skip
    await redis.xadd(keys.feedback, {"report": report.model_dump_json()})


async def test_a_demotion_never_reverts_a_table_published_meanwhile(
    redis_client: aioredis.Redis, redis_keys: RedisKeys, redis_server: RedisProcess
) -> None:
    services, racing, loop = _parts(redis_client, redis_keys, redis_server)
    await services.policies.put(POLICY)
    v1 = (await services.publisher.publish(_table())).version
    await _low_canary(redis_client, redis_keys, v1)
    # While the loop computes its demotion of v1, an operator publishes new profiles.
    operator = _table(low_chat=0.8)
    racing.rival = lambda: Publisher.publish(racing, operator)
    await loop.check_once()
    current = await services.tables.current()
    assert current is not None
    entry = current.entry(LOW)
    assert entry is not None
    assert entry.accuracy["chat"] == 0.8  # the operator's table stands
    # The evidence was about v1, not about the operator's table: nothing is demoted on it yet.
    assert current.content_sha256 == operator.content_sha256


async def test_a_rebuild_carries_a_demotion_published_while_it_was_building(
    redis_client: aioredis.Redis, redis_keys: RedisKeys, redis_server: RedisProcess
) -> None:
    services, racing, loop = _parts(redis_client, redis_keys, redis_server)
    await services.policies.put(POLICY)
    for report in _reports():
        await services.profiles.put(report)
    v1 = (await services.publisher.publish(_table())).version
    await _low_canary(redis_client, redis_keys, v1)
    rebuilds = TableService(
        services.profiles, services.policies, (services.tables, racing), BuildOptions(prune=False),
        _now,
    )  # fmt: skip
    # The rebuild read v1; the demotion of v1 lands before the rebuild publishes.
    racing.rival = loop.check_once
    await rebuilds.rebuild()
    current = await services.tables.current()
    assert current is not None
    assert current.version == v1 + 2  # the demotion, then the rebuild on top of it
    assert LOW in current.demotions
    entry = current.entry(LOW)
    assert entry is not None
    assert entry.accuracy_bound["math"] <= 0.60
    # And a rebuild later, with no race, keeps it too.
    await rebuilds.rebuild()
    again = await services.tables.current()
    assert again is not None
    assert LOW in again.demotions
