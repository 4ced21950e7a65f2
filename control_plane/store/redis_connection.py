"""The control plane's Redis client: bounded timeouts and one quick retry, never a long hang."""

from __future__ import annotations

import redis.asyncio as aioredis

from contracts.redis_topology import ClientOptions, connect_redis
from control_plane.settings import ControlPlaneSettings


def make_redis(settings: ControlPlaneSettings) -> aioredis.Redis:
    """A client for `settings.redis.url` (standalone, Sentinel or Cluster); connections open
    lazily on the first command."""
    redis = settings.redis
    return connect_redis(redis.url, ClientOptions(redis.timeout_s, redis.retries, 30))


def as_text(value: bytes | str) -> str:
    """Redis replies are bytes (we never set decode_responses); test clients may pass str."""
    return value.decode() if isinstance(value, bytes) else value


def as_version(value: object) -> int | None:
    """A stored version number, or None when absent or not a positive integer."""
    if not isinstance(value, bytes | str):
        return None
    text = as_text(value)
    return int(text) if text.isdigit() and int(text) > 0 else None
