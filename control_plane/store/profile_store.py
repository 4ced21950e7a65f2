"""Profile reports kept in Redis: hash `RedisKeys.profiles`, pair -> canonical report JSON.

Adapter: stores validated reports and reads them back; it never builds or publishes tables.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis.asyncio as aioredis

from contracts.profile_report import ProfileReport
from contracts.redis_keys import RedisKeys
from control_plane.build.documents import DocumentError, parse_json, parse_report
from control_plane.store.redis_connection import as_text
from control_plane.store.stored_data import StoredDataError


@dataclass(frozen=True, slots=True)
class StoredProfile:
    """One hash field: the report, or the reason it no longer validates."""

    pair: str
    report: ProfileReport | None
    problem: str | None = None


class ProfileStore:
    def __init__(self, redis: aioredis.Redis, keys: RedisKeys) -> None:
        self._redis = redis
        self._key = keys.profiles

    async def put(self, report: ProfileReport) -> bool:
        """Store (or replace) the report of its pair; True when the pair was new."""
        added = await self._redis.hset(self._key, report.pair, report.model_dump_json())
        return bool(added)

    async def get(self, pair: str) -> ProfileReport | None:
        raw = await self._redis.hget(self._key, pair)
        if raw is None:
            return None
        stored = self._parse(pair, raw)
        if stored.report is None:
            raise StoredDataError(stored.problem)
        return stored.report

    async def delete(self, pair: str) -> bool:
        return bool(await self._redis.hdel(self._key, pair))

    async def count(self) -> int:
        return int(await self._redis.hlen(self._key))

    async def all(self) -> list[StoredProfile]:
        """Every stored profile, sorted by pair, invalid ones with their problem."""
        raw = await self._redis.hgetall(self._key)
        return sorted(
            (self._parse(as_text(pair), value) for pair, value in raw.items()),
            key=lambda s: s.pair,
        )

    async def reports(self) -> list[ProfileReport]:
        """Every stored report; raises StoredDataError naming each invalid one."""
        stored = await self.all()
        problems = [s.problem for s in stored if s.problem]
        if problems:
            raise StoredDataError("; ".join(problems))
        return [s.report for s in stored if s.report is not None]

    def _parse(self, pair: str, raw: bytes | str) -> StoredProfile:
        source = f"stored profile {pair!r} ({self._key})"
        try:
            report = parse_report(parse_json(raw, source), source)
        except DocumentError as err:
            return StoredProfile(pair, None, f"{err}; push the report again or delete it")
        if report.pair != pair:
            return StoredProfile(pair, None, f"{source}: holds the report of {report.pair!r}")
        return StoredProfile(pair, report)
