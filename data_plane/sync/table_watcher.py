"""Adapter that keeps the TableStore on Redis's `current` routing table.

Loads at start, then follows the pointer on pub/sub events *and* by polling (pub/sub is
at-most-once; a Redis Cluster's events are on a sharded channel, SSUBSCRIBE), validating
(content hash included) and compiling before every swap. Redis down or a bad table never
unloads the last good table; a local snapshot lets a restart serve without Redis. Never on the
request path.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import redis.asyncio as aioredis
from pydantic import ValidationError
from redis.asyncio.client import PubSub
from redis.asyncio.cluster import ClusterPubSub
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from tenacity import AsyncRetrying, retry_if_exception_type, stop_never, wait_exponential_jitter

from contracts.redis_topology import ready_for_pubsub
from contracts.routing_table import RoutingTable
from data_plane.decision.compile import compile_table
from data_plane.domain import CompiledTable
from data_plane.settings import RedisSettings, TableSettings
from data_plane.table_store import TableStore
from data_plane.telemetry.metrics import DataPlaneMetrics

logger = logging.getLogger(__name__)

REDIS_UNAVAILABLE = "redis_unavailable"
INVALID_TABLE = "invalid_table"
MISSING_VERSION = "missing_version"


class TableLoadError(Exception):
    """A table that cannot be served; `reason` is the failure metric's label."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class LoadedTable:
    table: RoutingTable
    compiled: CompiledTable
    raw: bytes


def parse_table(raw: bytes, version: int | None) -> LoadedTable:
    """Validate (schema, content hash, the version the pointer named) and compile a table."""
    try:
        table = RoutingTable.model_validate_json(raw)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(root)"
        raise TableLoadError(INVALID_TABLE, f"{where}: {first['msg']}") from err
    if version is not None and table.version != version:
        raise TableLoadError(INVALID_TABLE, f"table says version {table.version}, not {version}")
    try:
        compiled = compile_table(table)
    except Exception as err:  # a valid table that does not compile is a bug: keep watching
        logger.exception("routing table v%s does not compile", table.version)
        raise TableLoadError(INVALID_TABLE, f"does not compile: {type(err).__name__}") from err
    return LoadedTable(table, compiled, raw)


class TableWatcher:
    """Follows `current` in Redis and swaps validated, compiled tables into the store."""

    def __init__(
        self,
        table: TableSettings,
        redis: RedisSettings,
        store: TableStore,
        metrics: DataPlaneMetrics,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._config, self._keys, self._backoff_max_s = table, redis.keys, redis.backoff_max_s
        self._store = store
        self._metrics = metrics
        self._wall_clock = wall_clock
        self._bad_versions: set[int] = set()
        self._redis_down = False
        self._verify = True  # compare the served table with Redis's on the first contact
        self._lock = asyncio.Lock()

    # --- snapshot ---------------------------------------------------------------------------

    def load_snapshot(self) -> bool:
        """Serve the snapshot file, if there is a valid one (startup, before Redis answers)."""
        path = self._config.snapshot_path
        if path is None or not path.exists():
            return False
        try:
            loaded = parse_table(path.read_bytes(), None)
        except (OSError, TableLoadError) as err:
            logger.error("snapshot %s unusable: %s", path, err)
            self._metrics.table_load_failures.labels(INVALID_TABLE).inc()
            return False
        self._swap(loaded, source="snapshot")
        return True

    async def _write_snapshot(self, raw: bytes) -> None:
        path = self._config.snapshot_path
        if path is None:
            return
        try:
            await asyncio.to_thread(_atomic_write, path, raw)
        except OSError as err:
            logger.warning("snapshot not written: %s", err)

    # --- one check ----------------------------------------------------------------------------

    async def refresh(self, client: aioredis.Redis) -> bool:
        """Follow the pointer once; True when a new table was swapped in.

        RedisError propagates (the caller backs off); a bad table is counted and skipped.
        After (re)connecting, the served version is re-read once and compared by content hash:
        a Redis that restarted without persistence may hand out the same version number again.
        """
        async with self._lock:
            version = await self._pointer(client)
            if version is None or version in self._bad_versions:
                return False
            if version == self._store.version and not self._verify:
                self._metrics.table_last_load.set(self._wall_clock())
                return False
            loaded = await self._load(client, version)
            self._verify = False
            if loaded is None:
                return False
            current = self._store.current
            if current is not None and current.content_sha256 == loaded.table.content_sha256:
                self._metrics.table_last_load.set(self._wall_clock())
                return False
            self._swap(loaded, source="redis")
        await self._write_snapshot(loaded.raw)
        return True

    async def _pointer(self, client: aioredis.Redis) -> int | None:
        pointer = await client.get(self._keys.table_current)
        self._mark_redis_up()
        if pointer is None:
            return None  # nothing published yet: not a failure
        try:
            return int(pointer)
        except ValueError:
            self._fail(TableLoadError(INVALID_TABLE, f"pointer is {pointer[:40]!r}"), -1)
            return None

    async def _load(self, client: aioredis.Redis, version: int) -> LoadedTable | None:
        stored = await client.get(self._keys.table_version(version))
        raw = stored.encode() if isinstance(stored, str) else stored
        try:
            if raw is None:
                raise TableLoadError(MISSING_VERSION, f"pointer names v{version}, not stored")
            return parse_table(raw, version)
        except TableLoadError as err:
            self._fail(err, version)
            return None

    def _swap(self, loaded: LoadedTable, source: str) -> None:
        table = loaded.table
        previous = self._store.swap(loaded.compiled, table.created_at.timestamp())
        now = self._wall_clock()
        self._metrics.table_version.set(table.version)
        self._metrics.table_created.set(table.created_at.timestamp())
        self._metrics.table_last_load.set(now)
        logger.info(
            "routing table v%s from %s (was v%s)",
            table.version,
            source,
            None if previous is None else previous.version,
            extra={"table_version": table.version},
        )

    def _fail(self, err: TableLoadError, version: int) -> None:
        self._metrics.table_load_failures.labels(err.reason).inc()
        if version not in self._bad_versions:
            self._bad_versions.add(version)
            logger.error(
                "routing table v%s rejected (%s): %s; keeping v%s",
                version,
                err.reason,
                err,
                self._store.version,
                extra={"table_version": version, "reason": err.reason},
            )

    def _mark_redis_up(self) -> None:
        if self._redis_down:
            self._redis_down = False
            self._verify = True
            self._bad_versions.clear()  # version numbers may be reused after a data loss
            logger.info("redis reachable again; following the table pointer")

    def _mark_redis_down(self, err: BaseException) -> None:
        self._metrics.table_load_failures.labels(REDIS_UNAVAILABLE).inc()
        if not self._redis_down:
            self._redis_down = True
            logger.warning(
                "redis unavailable (%s); serving table v%s",
                type(err).__name__,
                self._store.version,
                extra={"reason": REDIS_UNAVAILABLE},
            )

    # --- the background loop ------------------------------------------------------------------

    async def run(self, client: aioredis.Redis) -> None:
        """Watch forever: subscribe, catch up, then refresh on events and every poll interval."""
        retrying = AsyncRetrying(
            retry=retry_if_exception_type((RedisError, OSError)),
            wait=wait_exponential_jitter(multiplier=0.1, max=self._backoff_max_s),
            stop=stop_never,
            before_sleep=lambda state: self._mark_redis_down(
                (state.outcome.exception() if state.outcome else None) or RedisError()
            ),
            reraise=True,
        )
        await retrying(self._watch, client)

    async def _watch(self, client: aioredis.Redis) -> None:
        interval = self._config.poll_interval_s
        await ready_for_pubsub(client)
        async with client.pubsub(ignore_subscribe_messages=True) as pubsub:
            if isinstance(pubsub, ClusterPubSub):  # a cluster SPUBLISHes the events
                await pubsub.ssubscribe(self._keys.table_events)
            else:
                await pubsub.subscribe(self._keys.table_events)
            await self.refresh(client)
            next_poll = time.monotonic() + interval
            while True:
                wait_s = max(0.0, next_poll - time.monotonic())
                message = await _next_event(pubsub, wait_s)
                if message is not None or time.monotonic() >= next_poll:
                    await self.refresh(client)
                if time.monotonic() >= next_poll:
                    next_poll = time.monotonic() + interval


async def _next_event(pubsub: PubSub, wait_s: float) -> object:
    """The next table event within `wait_s`, else None: on the sharded channel (the slot
    owner's connection) in a cluster, on the plain one otherwise."""
    if isinstance(pubsub, ClusterPubSub):
        if not pubsub.node_pubsub_mapping:  # no shard subscription left: it would not wait
            raise RedisConnectionError("the sharded table-event subscription was dropped")
        return await pubsub.get_sharded_message(timeout=wait_s)
    return await pubsub.get_message(timeout=wait_s)


def _atomic_write(path: Path, data: bytes) -> None:
    """Write `data` to `path` so a reader sees the old file or the new one, never a torn one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
