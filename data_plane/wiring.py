"""The parts both composition roots wire the same way: the HTTP data plane (`app.py`) and
gateway mode (`gateway_app.py`) report one version, follow the routing table from one Redis
client through one table watcher, and answer `/healthz`, `/readyz` and `/metrics` with the
same handlers (`serving/probes.py`), and read tenants and shed requests the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import metadata

import redis.asyncio as aioredis

from data_plane.decision_step import Admission
from data_plane.settings import DataPlaneSettings
from data_plane.sync.table_watcher import TableWatcher
from data_plane.table_store import TableStore
from data_plane.telemetry.metrics import DataPlaneMetrics
from data_plane.telemetry.tenants import TenantLabels

UNKNOWN_VERSION = "0+unknown"  # not installed as a distribution (run from a source tree)


def package_version() -> str:
    """The installed `gearbox` distribution's version (`gearbox_build_info`, OpenAPI)."""
    try:
        return metadata.version("gearbox")
    except metadata.PackageNotFoundError:
        return UNKNOWN_VERSION


def new_metrics(settings: DataPlaneSettings) -> DataPlaneMetrics:
    return DataPlaneMetrics(package_version(), settings.git_sha)


def admission(settings: DataPlaneSettings) -> Admission:
    """Tenants (bounded labels, the key hash's key) and shedding, as configured."""
    a = settings.admission
    salt = None if a.tenant_key_salt is None else a.tenant_key_salt.get_secret_value().encode()
    return Admission(TenantLabels(a.tenant_top_n), a.tenant_header, salt, a.admission_shed)


def table_watcher(
    settings: DataPlaneSettings,
    store: TableStore,
    metrics: DataPlaneMetrics,
    wall_clock: Callable[[], float],
) -> TableWatcher:
    """The watcher that follows Redis's `current` table (or the snapshot alone) into `store`."""
    return TableWatcher(settings.table, settings.redis, store, metrics, wall_clock)


def redis_client(settings: DataPlaneSettings) -> aioredis.Redis:
    redis = settings.redis
    return aioredis.Redis.from_url(
        redis.url,
        socket_timeout=redis.timeout_s,
        socket_connect_timeout=redis.timeout_s,
        decode_responses=False,
    )
