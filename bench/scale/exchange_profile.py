"""Where one replica's in-flight exchange spends its CPU (cProfile, self time by library).

N - 1 other replicas leave their snapshots in a fresh redis-server; one replica then exchanges
`rounds` times in a row (with the simulated requests' churn before each), profiled. Shares are
of the profiled self CPU time, grouped by where the code lives.
"""

from __future__ import annotations

import asyncio
import cProfile
import pstats
import random
import time

import redis.asyncio as aioredis

from bench.scale.fleet_worker import TTL_S, Churn, endpoint_ids, replica_identity
from contracts.redis_keys import RedisKeys
from data_plane.resilience.endpoint_load import LoadTracker
from data_plane.sync.command_link import CommandLink
from data_plane.sync.in_flight_sharing import InFlightSharing
from demo.redis_launcher import private_redis

_GROUPS = (
    ("data_plane/", "data plane (sharing, load tracker)"),
    ("bench/", "simulated requests"),
    ("/random.py", "simulated requests"),  # only the churn draws random numbers here
    ("redis/", "redis-py"),
    ("asyncio/", "asyncio"),
    ("json/", "json"),
)


def _group(filename: str, function: str) -> str:
    for marker, name in _GROUPS:
        if marker in filename:
            return name
    if "socket" in function or "select" in function:
        return "system calls (socket, epoll)"
    return "other"


async def _profile(url: str, replicas: int, endpoints: int, rounds: int) -> pstats.Stats:
    client = aioredis.Redis.from_url(url)
    link = CommandLink(client)  # as InFlightSharing.run sends its commands
    keys, rng, ids = RedisKeys("bench"), random.Random(3), endpoint_ids(endpoints)
    churns = [Churn(LoadTracker(), ids, rng) for _ in range(replicas)]
    sharing = [
        InFlightSharing(
            keys,
            replica_identity(f"dp-{i}"),
            c.own,
            c.tracker.set_peers_in_flight,
            TTL_S * 60,
            time.monotonic,
        )
        for i, c in enumerate(churns)
    ]
    for _ in range(3):  # every endpoint carries some load at every replica
        for s in sharing:
            await s.exchange(link)
    profile = cProfile.Profile(time.process_time)  # CPU time: a wait on the socket is not cost
    profile.enable()
    for _ in range(rounds):
        await sharing[0].exchange(link)
    profile.disable()
    await link.close()
    await client.aclose()
    return pstats.Stats(profile)


def profile_exchange(replicas: int, endpoints: int, rounds: int = 500) -> list[tuple[str, float]]:
    """(where, share of self time), largest first; a builtin's time goes to its main caller."""
    with private_redis() as url:
        stats = asyncio.run(_profile(url, replicas, endpoints, rounds))
    rows = stats.stats  # type: ignore[attr-defined]
    shares: dict[str, float] = {}
    for (filename, _, function), row in rows.items():
        where = _group(filename, function)
        callers = row[4]
        if filename == "~" and where == "other" and callers:
            # A builtin (dict.get, isinstance, ...): charged to the code that called it most.
            caller = max(callers.items(), key=lambda kv: kv[1][2])[0]
            where = _group(caller[0], caller[2])
        shares[where] = shares.get(where, 0.0) + row[2]
    total = sum(shares.values()) or 1.0
    return sorted(((k, v / total) for k, v in shares.items()), key=lambda kv: -kv[1])
