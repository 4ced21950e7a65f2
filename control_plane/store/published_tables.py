"""Reading published routing tables: the current one, a given version, and the history.

Adapter; read-only. The writer is `publisher.py`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import redis.asyncio as aioredis
from pydantic import ValidationError

from contracts.redis_keys import RedisKeys
from contracts.routing_table import RoutingTable
from control_plane.build.documents import problems_of
from control_plane.store.redis_connection import as_text, as_version
from control_plane.store.stored_data import StoredDataError

_POINTER_RETRIES = 3


@dataclass(frozen=True, slots=True)
class VersionInfo:
    version: int
    content_sha256: str | None  # None when the stored JSON is unreadable
    created_at: str | None
    entries: int
    current: bool


def parse_stored_table(raw: bytes | str, version: int, key: str) -> RoutingTable:
    """Validate a stored table (hash included) and check it is the version its key says."""
    try:
        table = RoutingTable.model_validate_json(raw)
    except ValidationError as err:
        detail = "; ".join(str(p) for p in problems_of(err))
        raise StoredDataError(f"stored table {key}: {detail}") from err
    if table.version != version:
        raise StoredDataError(f"stored table {key}: holds version {table.version}")
    return table


def _summary(version: int, raw: bytes | str | None, current: int | None) -> VersionInfo:
    try:
        data = json.loads(raw) if raw is not None else {}
    except json.JSONDecodeError:
        data = {}
    data = data if isinstance(data, dict) else {}
    sha, created, entries = data.get("content_sha256"), data.get("created_at"), data.get("entries")
    return VersionInfo(
        version=version,
        content_sha256=sha if isinstance(sha, str) else None,
        created_at=created if isinstance(created, str) else None,
        entries=len(entries) if isinstance(entries, list) else 0,
        current=version == current,
    )


class PublishedTables:
    def __init__(self, redis: aioredis.Redis, keys: RedisKeys) -> None:
        self._redis = redis
        self._keys = keys

    async def current_version(self) -> int | None:
        return as_version(await self._redis.get(self._keys.table_current))

    async def get(self, version: int) -> RoutingTable | None:
        """Table `version`, None when it was never published or has been trimmed."""
        key = self._keys.table_version(version)
        raw = await self._redis.get(key)
        return None if raw is None else parse_stored_table(raw, version, key)

    async def current(self) -> RoutingTable | None:
        """The table the pointer names (re-read when a concurrent trim raced the read)."""
        for _ in range(_POINTER_RETRIES):
            version = await self.current_version()
            if version is None:
                return None
            table = await self.get(version)
            if table is not None:
                return table
        raise StoredDataError(f"{self._keys.table_current} names a version that is not stored")

    async def history(self) -> tuple[int | None, list[VersionInfo]]:
        """(current version, kept versions newest first)."""
        members = await self._redis.zrevrange(self._keys.table_history, 0, -1)
        versions = [v for v in (as_version(m) for m in members) if v is not None]
        current = await self.current_version()
        if not versions:
            return current, []
        raws = await self._redis.mget([self._keys.table_version(v) for v in versions])
        return current, [_summary(v, raw, current) for v, raw in zip(versions, raws, strict=True)]

    async def status(self) -> dict[str, str]:
        """The control plane's last publish outcome (hash `control_plane_status`)."""
        raw = await self._redis.hgetall(self._keys.control_plane_status)
        return {as_text(k): as_text(v) for k, v in raw.items()}
