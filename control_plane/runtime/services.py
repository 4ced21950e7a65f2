"""The adapters one process uses, wired around one Redis client (composition helper for
`app.py` and the CLI; nothing else constructs them)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import redis.asyncio as aioredis

from contracts.policy import Policy
from control_plane.runtime.table_service import TableService
from control_plane.settings import ControlPlaneSettings
from control_plane.store.policy_store import PolicyStore
from control_plane.store.profile_store import ProfileStore
from control_plane.store.published_tables import PublishedTables
from control_plane.store.publisher import Publisher


@dataclass(frozen=True, slots=True)
class Services:
    redis: aioredis.Redis
    profiles: ProfileStore
    policies: PolicyStore
    tables: PublishedTables
    publisher: Publisher
    table_service: TableService


def make_services(
    redis: aioredis.Redis,
    settings: ControlPlaneSettings,
    clock: Callable[[], datetime],
    file_policy: Policy | None,
) -> Services:
    keys = settings.redis.keys
    publisher = Publisher(redis, keys, settings.publish, clock=lambda: clock().timestamp())
    profiles = ProfileStore(redis, keys)
    policies = PolicyStore(redis, keys, file_policy)
    tables = PublishedTables(redis, keys)
    return Services(
        redis=redis,
        profiles=profiles,
        policies=policies,
        tables=tables,
        publisher=publisher,
        table_service=TableService(profiles, policies, (tables, publisher), settings.build, clock),
    )
