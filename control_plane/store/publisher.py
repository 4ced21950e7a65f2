"""Publishing routing tables to Redis atomically, with history and rollback.

Adapter. Publish = `v = INCR seq`; `SET table:v:{v} <json> NX` (immutable); then
`MULTI / SET current v / ZADD history / PUBLISH events v / EXEC` (SPUBLISH in a cluster, where
all these keys share the table's hash tag: `RedisKeys.cluster`). One publisher at a time holds
a short lock, and the final transaction WATCHes the pointer too, so even a publisher whose lock
expired cannot move the pointer past another's: the pointer only ever names a fully written
version. Same content as the current table publishes nothing.

Compare-and-set: a table derived from the current one (a refit, a demotion, a rebuild that
carries demotions) names that one as its `base`; it publishes only while `base` is still the
current version, checked under the same WATCH, so it never reverts a table published after it
was computed (`BaseMovedError`: the caller recomputes on the new current one).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from enum import StrEnum

import redis.asyncio as aioredis
from redis.asyncio.client import Pipeline
from redis.exceptions import LockNotOwnedError, RedisError, WatchError
from redis.typing import EncodableT, FieldT

from contracts.redis_keys import RedisKeys
from contracts.redis_topology import as_cluster
from contracts.routing_table import RoutingTable, with_version
from control_plane.settings import PublisherOptions
from control_plane.store.published_tables import parse_stored_table
from control_plane.store.redis_connection import as_text, as_version
from control_plane.store.stored_data import StoredDataError

logger = logging.getLogger(__name__)
LockFactory = Callable[[], contextlib.AbstractAsyncContextManager[None]]


def _begin(pipe: Pipeline) -> None:
    """Start MULTI after WATCH; later commands only queue until `execute()`."""
    pipe.multi()  # type: ignore[no-untyped-call]  # untyped in redis-py


def _queued(*replies: object) -> None:
    """Commands issued after MULTI return the pipeline itself; there is nothing to await."""


class PublishOutcome(StrEnum):
    """Outcome of one publish attempt (the `outcome` label of gearbox_cp_publishes_total)."""

    PUBLISHED = "published"
    UNCHANGED = "unchanged"
    FAILED = "failed"
    REJECTED = "rejected"


class PublishError(Exception):
    """Publishing or rolling back did not happen; the previous table stays current."""


class PublishBusyError(PublishError):
    """Another publisher held the lock for longer than we wait."""


class PublishConflictError(PublishError):
    """The pointer moved while we published (a publisher whose lock had expired)."""


class BaseMovedError(PublishError):
    """The table was computed from a version that is no longer current; nothing published."""


class VersionNotFoundError(PublishError):
    """Rollback to a version that was never published or has been trimmed."""


@dataclass(frozen=True, slots=True)
class PublishResult:
    outcome: PublishOutcome
    version: int
    content_sha256: str
    previous_version: int | None


@dataclass(frozen=True, slots=True)
class RollbackResult:
    version: int
    content_sha256: str
    previous_version: int | None


class Publisher:
    def __init__(
        self,
        redis: aioredis.Redis,
        keys: RedisKeys,
        options: PublisherOptions,
        clock: Callable[[], float] = time.time,
        lock: LockFactory | None = None,
    ) -> None:
        self._redis = redis
        self._keys = keys
        self._options = options
        self._clock = clock
        self._lock = lock or self._redis_lock

    async def publish(self, table: RoutingTable, base: int | None = None) -> PublishResult:
        """Publish `table` as a new version, or report it unchanged. With `base`, only while
        version `base` is current (else BaseMovedError; `base` 0: while no table is). Raises
        PublishError or RedisError on failure, with the previous table still current."""
        try:
            async with self._lock():
                result = await self._publish_locked(table, base)
                if result.outcome is PublishOutcome.PUBLISHED:
                    await self._trim()
                    await self._trim_orphans()
        except BaseMovedError:
            raise  # not a failure: the caller recomputes on the new current table
        except (PublishError, RedisError) as err:
            await self._record({"last_outcome": PublishOutcome.FAILED, "last_error": str(err)})
            raise
        fields: dict[FieldT, EncodableT] = {
            "last_outcome": result.outcome.value,
            "last_version": str(result.version),
            "last_content_sha256": result.content_sha256,
            "last_error": "",
        }
        if result.outcome is PublishOutcome.PUBLISHED:
            fields["last_published_at"] = repr(self._clock())
        await self._record(fields)
        return result

    async def rollback(self, version: int) -> RollbackResult:
        """Point `current` at kept, valid `version` and announce it. Raises VersionNotFoundError,
        StoredDataError (the stored table does not validate), PublishError or RedisError."""
        async with self._lock(), self._redis.pipeline(transaction=True) as pipe:
            await pipe.watch(self._keys.table_current)
            previous = as_version(await pipe.get(self._keys.table_current))
            key = self._keys.table_version(version)
            raw = await pipe.get(key)
            kept = await pipe.zscore(self._keys.table_history, str(version))
            if raw is None or kept is None:
                raise VersionNotFoundError(f"version {version} is not among the kept versions")
            table = parse_stored_table(raw, version, key)
            _begin(pipe)
            self._queue_pointer_move(pipe, version)
            await self._execute(pipe, f"rollback to {version}")
        await self._record(
            {"last_rollback_version": str(version), "last_rollback_at": repr(self._clock())}
        )
        logger.info("rolled back to table version %s", version, extra={"table_version": version})
        return RollbackResult(version, table.content_sha256, previous)

    async def record_rejected(self, reason: str) -> None:
        """Note a table that failed to build (bad reports or policy); nothing was published."""
        await self._record({"last_outcome": PublishOutcome.REJECTED, "last_error": reason})

    async def _publish_locked(self, table: RoutingTable, base: int | None) -> PublishResult:
        keys = self._keys
        async with self._redis.pipeline(transaction=True) as pipe:
            await pipe.watch(keys.table_current)
            previous = as_version(await pipe.get(keys.table_current))
            if base is not None and (previous or 0) != base:
                raise BaseMovedError(
                    f"built on version {base}, but version {previous} is current; recompute"
                )
            if previous is not None and await self._sha_of(pipe, previous) == table.content_sha256:
                return PublishResult(
                    PublishOutcome.UNCHANGED, previous, table.content_sha256, previous
                )
            version = int(await pipe.incr(keys.table_seq))
            body = with_version(table, version).model_dump_json()
            if not await pipe.set(keys.table_version(version), body, nx=True):
                raise PublishError(
                    f"{keys.table_version(version)} already exists; refusing to overwrite a "
                    f"published table (is {keys.table_seq} behind the stored versions?)"
                )
            _begin(pipe)
            self._queue_pointer_move(pipe, version)
            try:
                await self._execute(pipe, f"publish of version {version}")
            except PublishConflictError:
                await self._redis.delete(keys.table_version(version))  # never pointed at
                raise
        logger.info("published table version %s", version, extra={"table_version": version})
        return PublishResult(PublishOutcome.PUBLISHED, version, table.content_sha256, previous)

    def _queue_pointer_move(self, pipe: Pipeline, version: int) -> None:
        # A cluster's transaction takes no PUBLISH (not on a slot): SPUBLISH on the sharded
        # channel, whose hash tag is the table's keys' (`RedisKeys.cluster`).
        announce = pipe.spublish if as_cluster(self._redis) else pipe.publish
        _queued(
            pipe.set(self._keys.table_current, version),
            pipe.zadd(self._keys.table_history, {str(version): version}),
            announce(self._keys.table_events, str(version)),
        )

    @staticmethod
    async def _execute(pipe: Pipeline, what: str) -> None:
        try:
            await pipe.execute()
        except WatchError as err:
            raise PublishConflictError(
                f"{what} aborted: the current pointer moved meanwhile"
            ) from err

    async def _sha_of(self, pipe: Pipeline, version: int) -> str | None:
        """content_sha256 of a stored version, None when missing or unreadable."""
        raw = await pipe.get(self._keys.table_version(version))
        if raw is None:
            return None
        try:
            return parse_stored_table(
                raw, version, self._keys.table_version(version)
            ).content_sha256
        except StoredDataError:
            return None  # an unreadable current table is replaced by the new one

    async def _trim(self) -> None:
        """Delete versions older than the newest `history_limit`, never the current one.

        Best effort: a failure leaves extra versions, which the next publish trims.
        """
        keys = self._keys
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                await pipe.watch(keys.table_current, keys.table_history)
                current = as_version(await pipe.get(keys.table_current))
                members = await pipe.zrange(keys.table_history, 0, -1)
                versions = sorted(v for v in map(as_version, members) if v is not None)
                drop = [v for v in versions[: -self._options.history_limit] if v != current]
                if not drop:
                    return
                _begin(pipe)
                _queued(
                    pipe.delete(*(keys.table_version(v) for v in drop)),
                    pipe.zrem(keys.table_history, *(str(v) for v in drop)),
                )
                await pipe.execute()
        except (WatchError, RedisError) as err:
            logger.warning("history trim skipped: %s", err)

    async def _stored_versions(self) -> set[int]:
        """Every version with a `table:v:N` key (SCAN: the keys of this prefix only)."""
        head = self._keys.table_version(0)[:-1]
        found = set()
        async for key in self._redis.scan_iter(match=f"{head}*", count=1000):
            version = as_version(as_text(key).removeprefix(head))
            if version is not None:
                found.add(version)
        return found

    async def _trim_orphans(self) -> None:
        """Delete version keys a publisher wrote but never pointed at (it died between
        `SET NX` and its transaction). Only versions below the newest in the history: a
        publisher still working on such a version WATCHed the pointer before that newest one
        moved it, so its transaction fails anyway; a newer one may still be on its way.
        Best effort, like `_trim`."""
        keys = self._keys
        try:
            stored = await self._stored_versions()
            async with self._redis.pipeline(transaction=True) as pipe:
                await pipe.watch(keys.table_current, keys.table_history)
                current = as_version(await pipe.get(keys.table_current))
                members = await pipe.zrange(keys.table_history, 0, -1)
                kept = {v for v in map(as_version, members) if v is not None}
                newest = max(kept, default=0)
                drop = sorted(v for v in stored - kept if v < newest and v != current)
                if not drop:
                    return
                _begin(pipe)
                _queued(pipe.delete(*(keys.table_version(v) for v in drop)))
                await pipe.execute()
            logger.warning("deleted %d orphan table version(s): %s", len(drop), drop)
        except (WatchError, RedisError) as err:
            logger.warning("orphan trim skipped: %s", err)

    async def _record(self, fields: dict[FieldT, EncodableT]) -> None:
        """Write the outcome to the status hash; best effort (Redis may be what failed)."""
        fields = {**fields, "last_attempt_at": repr(self._clock())}
        try:
            await self._redis.hset(self._keys.control_plane_status, mapping=fields)
        except RedisError as err:
            logger.warning("could not record the publish outcome: %s", err)

    @contextlib.asynccontextmanager
    async def _redis_lock(self) -> AsyncIterator[None]:
        lock = self._redis.lock(
            self._keys.publish_lock,
            timeout=self._options.lock_ttl_s,
            blocking_timeout=self._options.lock_wait_s,
        )
        if not await lock.acquire():
            raise PublishBusyError(
                f"another publisher holds {self._keys.publish_lock}; retry in a few seconds"
            )
        try:
            yield
        finally:
            try:
                await lock.release()
            except LockNotOwnedError:
                # The lock expired while we worked; WATCH on the pointer kept us safe.
                logger.warning("publish lock expired before release")
