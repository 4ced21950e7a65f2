"""The routing policy tables are built with: the one PUT to Redis, else the settings file's,
else the defaults. Adapter; validation happens before `put`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import redis.asyncio as aioredis
from pydantic import ValidationError

from contracts.policy import Policy
from contracts.redis_keys import RedisKeys
from control_plane.build.documents import problems_of
from control_plane.store.stored_data import StoredDataError

PolicySource = Literal["redis", "file", "default"]


@dataclass(frozen=True, slots=True)
class EffectivePolicy:
    policy: Policy
    source: PolicySource


class PolicyStore:
    def __init__(
        self, redis: aioredis.Redis, keys: RedisKeys, file_policy: Policy | None = None
    ) -> None:
        self._redis = redis
        self._key = keys.policy
        self._fallback = (
            EffectivePolicy(file_policy, "file")
            if file_policy is not None
            else EffectivePolicy(Policy(), "default")
        )

    async def get(self) -> EffectivePolicy:
        raw = await self._redis.get(self._key)
        if raw is None:
            return self._fallback
        try:
            return EffectivePolicy(Policy.model_validate_json(raw), "redis")
        except ValidationError as err:
            detail = "; ".join(str(p) for p in problems_of(err))
            raise StoredDataError(f"stored policy ({self._key}): {detail}; PUT it again") from err

    async def put(self, policy: Policy) -> None:
        await self._redis.set(self._key, policy.model_dump_json())
