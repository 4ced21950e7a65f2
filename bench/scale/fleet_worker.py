"""One worker process of simulated replicas on a real Redis (`python -m bench.scale.fleet_worker`).

Each simulated replica is the data plane's own `InFlightSharing` (or `BreakerAnnouncements`)
with a `LoadTracker`, on a Redis connection of its own, exactly as `data_plane.app` wires it, on
the event loop the data plane runs by default (uvloop; `--loop asyncio` for the plain one);
only the requests are simulated (in-flight counts that change before every exchange). Prints
one JSON line: CPU seconds of this process over the measured window, its wall time, and the work
done (exchanges answered, announcements heard).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import time
from collections.abc import Callable, Mapping, Sequence

import redis.asyncio as aioredis

from contracts.redis_keys import RedisKeys
from data_plane.__main__ import new_event_loop
from data_plane.resilience.endpoint_load import LoadTracker
from data_plane.settings import DataPlaneSettings
from data_plane.sync.breaker_announcements import BreakerAnnouncements
from data_plane.sync.in_flight_sharing import InFlightSharing
from data_plane.sync.replica_identity import ReplicaIdentity

INTERVAL_S = 0.025  # the default IN_FLIGHT_SHARE_INTERVAL_MS
TTL_S = 1.0  # the default IN_FLIGHT_SHARE_TTL_S
ANNOUNCE_PERIOD_S = 5.0  # every replica announces every endpoint once per default cooldown
CHURN_SHARE = 0.1  # endpoints whose in-flight count moves per interval, per replica
_KEEP: set[asyncio.Task[None]] = set()  # the loops run until the process exits


def replica_identity(name: str) -> ReplicaIdentity:
    return ReplicaIdentity(name, lambda: None, time.monotonic)


def endpoint_ids(n: int) -> list[str]:
    return [f"bench-{i // 2:03d}@awq-int4#{i % 2}" for i in range(n)]


class Churn:
    """A replica's simulated requests: before each snapshot, a tenth of its endpoints gain or
    lose one request in flight (tied to the exchanges, so a slowed machine does not charge
    extra churn to each exchange)."""

    def __init__(self, tracker: LoadTracker, endpoints: list[str], rng: random.Random) -> None:
        self.tracker, self._endpoints, self._rng = tracker, endpoints, rng
        self._k = max(1, int(len(endpoints) * CHURN_SHARE))

    def own(self) -> Mapping[str, int]:
        tracker, rng = self.tracker, self._rng
        for endpoint in rng.sample(self._endpoints, self._k):
            if rng.random() < 0.5 or tracker.in_flight(endpoint) == 0:
                tracker.acquire(endpoint)
            else:
                tracker.release(endpoint)
        return tracker.in_flight_all()


async def _sharing(args: argparse.Namespace, clients: list[aioredis.Redis]) -> None:
    keys, rng = RedisKeys("bench"), random.Random(args.first)
    endpoints = endpoint_ids(args.endpoints)
    churns = [Churn(LoadTracker(), endpoints, rng) for _ in clients]
    replicas = [
        InFlightSharing(
            keys,
            replica_identity(f"dp-{args.first + i}"),
            churn.own,
            churn.tracker.set_peers_in_flight,
            TTL_S,
            time.monotonic,
        )
        for i, churn in enumerate(churns)
    ]
    _KEEP.update(
        asyncio.create_task(r.run(c, INTERVAL_S)) for r, c in zip(replicas, clients, strict=True)
    )
    await _measure(args, lambda: sum(r.exchanges for r in replicas))


async def _announce(replicas: Sequence[BreakerAnnouncements], endpoints: list[str]) -> None:
    """Each replica announces each endpoint once per ANNOUNCE_PERIOD_S, spread evenly."""
    ticks = 100
    per_tick = max(1, len(endpoints) // ticks)
    i = 0
    while True:
        for replica in replicas:
            for endpoint in endpoints[i : i + per_tick]:
                replica.announce(endpoint, 5.0)
        i = (i + per_tick) % len(endpoints)
        await asyncio.sleep(ANNOUNCE_PERIOD_S * per_tick / len(endpoints))


async def _breakers(args: argparse.Namespace, clients: list[aioredis.Redis]) -> None:
    keys = RedisKeys("bench")
    ejected: dict[str, float] = {}
    replicas = [
        BreakerAnnouncements(
            keys.breaker_events, replica_identity(f"dp-{args.first + i}"), ejected.__setitem__, 30.0
        )
        for i in range(len(clients))
    ]
    tasks = [
        asyncio.create_task(r.listen_forever(c)) for r, c in zip(replicas, clients, strict=True)
    ]
    tasks += [
        asyncio.create_task(r.send_forever(c)) for r, c in zip(replicas, clients, strict=True)
    ]
    tasks.append(asyncio.create_task(_announce(replicas, endpoint_ids(args.endpoints))))
    _KEEP.update(tasks)
    await _measure(args, lambda: sum(r.heard for r in replicas))


async def _measure(args: argparse.Namespace, work: Callable[[], int]) -> None:
    """Print the measured window's CPU, wall time and work as one JSON line."""
    await asyncio.sleep(args.warmup_s)
    before, cpu, wall = work(), time.process_time(), time.monotonic()
    await asyncio.sleep(args.seconds)
    done = work() - before
    print(
        json.dumps(
            {"cpu_s": time.process_time() - cpu, "wall_s": time.monotonic() - wall, "work": done}
        ),
        flush=True,
    )


async def _main(args: argparse.Namespace) -> None:
    clients = [aioredis.Redis.from_url(args.redis_url) for _ in range(args.replicas)]
    await (_sharing if args.mode == "sharing" else _breakers)(args, clients)
    os._exit(0)  # the replicas' loops and connections end with the process: no teardown


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.scale.fleet_worker")
    parser.add_argument("--mode", choices=("sharing", "breakers"), required=True)
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--replicas", type=int, required=True)
    parser.add_argument("--first", type=int, default=0, help="number of the first replica")
    parser.add_argument("--endpoints", type=int, required=True)
    parser.add_argument("--warmup-s", type=float, default=1.5)
    parser.add_argument("--seconds", type=float, default=5.0)
    default_loop = DataPlaneSettings.model_fields["event_loop"].default
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default=default_loop)
    args = parser.parse_args(argv)
    with asyncio.Runner(loop_factory=lambda: new_event_loop(args.loop)) as runner:
        runner.run(_main(args))


if __name__ == "__main__":
    main()
