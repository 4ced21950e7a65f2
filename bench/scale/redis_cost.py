"""What in-flight sharing costs Redis, at 64 replicas x 200 endpoints on one redis-server and
256 x 1,000 on a 3-master cluster (docs/benchmarks.md, "Scale"; `python -m
bench.scale.redis_cost`).

One process drives N logical replicas, each the data plane's own `InFlightSharing.run` on a
connection of its own, with the fleet bench's simulated requests (`Churn`). Over a fixed window
it reads each redis-server's CPU (user + system) from /proc/PID/stat and counts the exchanges
answered. One process cannot keep 256 replicas at 40 exchanges a second, so the figures are
per exchange, and at the nominal rate = per exchange x N x 40/s (the achieved rate is shown
beside them). Staleness: every 100 ms replica 0 sets a probe endpoint to a new count; the time
until each other replica is handed it (its `on_peers`) is one sample. `--baseline-source
FILE` runs the same harness on another `in_flight_sharing.py` (c680376's: one script call
with every endpoint on one slot).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import inspect
import json
import random
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from types import ModuleType
from typing import Any

import redis

from bench.scale.fleet_worker import INTERVAL_S, TTL_S, Churn, endpoint_ids, replica_identity
from bench.scale.shard_counters import Counters, ShardProfile, counters, idle_cpu_per_s, profile
from contracts.redis_keys import RedisKeys
from contracts.redis_topology import ClientOptions, connect_redis
from data_plane.resilience.endpoint_load import LoadTracker
from data_plane.sync import in_flight_sharing
from data_plane.sync.in_flight_epochs import epoch_lengths
from data_plane.sync.in_flight_sharing import CLUSTER_GROUPS, GROUPS
from demo.redis_cluster import running_cluster
from demo.redis_launcher import running_redis

PROBE = "probe@awq-int4#0"
PROBE_EVERY_S = 0.1
IDLE_S = 2.0  # each redis-server's background CPU is measured this long before a run
WARM_UP_S = 180.0  # at most, until every replica answered two exchanges (steady state)


@dataclass(frozen=True, slots=True)
class RedisCost:
    code: str  # "now", or the baseline's name
    topology: str  # "standalone" or "cluster of 3"
    replicas: int
    endpoints: int
    seconds: float
    exchanges_per_s: float  # achieved, all replicas
    nominal_per_s: float  # N x 40
    redis_cpu_per_exchange_us: list[float]  # per redis-server (shard)
    replica_cpu_per_exchange_us: float  # the driving process, per exchange
    staleness_ms: tuple[float, float, float]  # p50, p99, max (as measured)
    dilation: (
        float  # the TTL and refresh stretched by this (nominal / achieved rate of a first run)
    )
    groups: int
    shards: list[ShardProfile] = field(default_factory=list)  # as redis_cpu_per_exchange_us

    @property
    def redis_at_nominal(self) -> list[float]:
        """Each redis-server's CPU, of one core, at the nominal rate: its background a second
        (measured with no client; not a cost per exchange) plus the rest per exchange x the
        nominal rate."""
        if not self.shards:
            return [us * self.nominal_per_s / 1e6 for us in self.redis_cpu_per_exchange_us]
        return [
            shard.idle_cpu_per_s + us * self.nominal_per_s / 1e6
            for us, shard in zip(self.per_exchange_us, self.shards, strict=True)
        ]

    @property
    def per_exchange_us(self) -> list[float]:
        """Each redis-server's CPU per exchange less its background over the window."""
        if not self.shards:
            return list(self.redis_cpu_per_exchange_us)
        return [
            max(0.0, shard.cpu_us - shard.idle_cpu_per_s * 1e6 / self.exchanges_per_s)
            for shard in self.shards
        ]

    @property
    def staleness_at_speed_ms(self) -> tuple[float, float, float]:
        """The staleness in the fleet's own time: as measured / the slowdown."""
        p50, p99, most = self.staleness_ms
        return p50 / self.dilation, p99 / self.dilation, most / self.dilation

    @property
    def replica_at_nominal(self) -> float:
        """One replica's CPU, of one core, at 40 exchanges a second."""
        return self.replica_cpu_per_exchange_us / INTERVAL_S / 1e6


class Probe:
    """Replica 0's probe count and the delays until the others are handed it."""

    def __init__(self, every_s: float) -> None:
        self.every_s, self.value = every_s, 0
        self.set_at: dict[int, float] = {}  # value -> when replica 0 took it
        self.seen: dict[int, int] = {}  # replica -> the highest value it was handed
        self.delays_ms: list[float] = []

    def own(self, churn: Callable[[], Mapping[str, int]]) -> Callable[[], Mapping[str, int]]:
        def own() -> Mapping[str, int]:
            counts = dict(churn())
            counts[PROBE] = self.value
            return counts

        return own

    def on_peers(self, i: int, tracker: LoadTracker) -> Callable[[Mapping[str, float]], None]:
        def on_peers(peers: Mapping[str, float]) -> None:
            tracker.set_peers_in_flight(peers)
            value, now = int(peers.get(PROBE, 0)), time.monotonic()
            for v in range(self.seen.get(i, value) + 1, value + 1):  # each value once
                if v in self.set_at:
                    self.delays_ms.append((now - self.set_at[v]) * 1000)
            self.seen[i] = max(value, self.seen.get(i, 0))

        return on_peers

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.every_s)
            self.value += 1
            self.set_at[self.value] = time.monotonic()


def _busy_first(churn: Churn) -> Callable[[], Mapping[str, int]]:
    """The replica's counts, unchurned on the first call: its first exchange places every
    endpoint (each holds a request), so none is new to it later. Churned from the first
    call, the endpoints it took to 0 were placed one by one in later exchanges: 0.14 HMGETs
    per exchange at 256 x 1,000 (an extra round trip each), which a fleet whose endpoints
    are all known does not send."""
    calls = 0

    def own() -> Mapping[str, int]:
        nonlocal calls
        calls += 1
        return churn.tracker.in_flight_all() if calls == 1 else churn.own()

    return own


def _replicas(
    module: ModuleType, n: int, endpoints: int, probe: Probe, dilation: float, groups: int
) -> list[Any]:
    keys, rng, ids = RedisKeys("bench", cluster=True), random.Random(5), endpoint_ids(endpoints)
    made = []
    for i in range(n):
        churn = Churn(LoadTracker(), ids, rng)
        for endpoint in ids:  # a fleet at scale has every endpoint busy: no endpoint is new
            churn.tracker.acquire(endpoint)
        own = _busy_first(churn)
        if i == 0:
            own = probe.own(own)
        ttl_s = TTL_S * dilation
        args = (replica_identity(f"dp-{i}"), own, probe.on_peers(i, churn.tracker), ttl_s)
        if "groups" in inspect.signature(module.InFlightSharing).parameters:  # the sums'
            # epochs follow the TTL, stretched with it
            made.append(module.InFlightSharing(keys, *args, time.monotonic, groups=groups))
        else:  # c680376: four keys under one tag, one call per exchange
            tag = "{bench:dp:in-flight}"
            old_keys = tuple(f"{tag}:{k}" for k in ("snapshots", "seen", "total", "owners"))
            made.append(module.InFlightSharing(old_keys, *args, time.monotonic))
    return made


@dataclass(frozen=True, slots=True)
class Fleet:
    module: ModuleType
    replicas: int
    endpoints: int
    groups: int
    dilation: float = 1.0  # nominal / achieved exchange rate


@dataclass(frozen=True, slots=True)
class Servers:
    """The redis-servers of a run: the URL the replicas use, and each server's process id and
    a client of its own (for its counters)."""

    url: str
    pids: list[int]
    clients: list[redis.Redis]

    def counters(self) -> list[Counters]:
        return [counters(pid, c) for pid, c in zip(self.pids, self.clients, strict=True)]


@dataclass(frozen=True, slots=True)
class Window:
    wall: float
    exchanges: int
    own_cpu_s: float  # the driving process's
    delays_ms: list[float]
    shards: list[ShardProfile]


async def _drive(fleet: Fleet, servers: Servers, seconds: float, idle: list[float]) -> Window:
    probe, n = Probe(min(PROBE_EVERY_S * fleet.dilation, 0.5)), fleet.replicas
    replicas = _replicas(fleet.module, n, fleet.endpoints, probe, fleet.dilation, fleet.groups)
    # Each replica's link has connections of its own; the socket timeout is stretched with the
    # run's time (a loaded driving process answered past 5 s: a quarter of the exchanges
    # failed and re-entered their epochs whole, charging Redis for the harness's slowness).
    client = connect_redis(servers.url, ClientOptions(5.0 * fleet.dilation))
    tasks = [asyncio.create_task(r.run(client, INTERVAL_S)) for r in replicas]
    tasks.append(asyncio.create_task(probe.run()))
    await asyncio.sleep(3.0)  # every replica connected and every endpoint loaded...
    for _ in range(int(WARM_UP_S / 0.1)):  # ...and past its first exchanges (whole counts)
        if min(r.exchanges for r in replicas) >= 2:
            break
        await asyncio.sleep(0.1)
    before = servers.counters()
    own, wall, done = time.process_time(), time.monotonic(), sum(r.exchanges for r in replicas)
    probe.delays_ms.clear()
    await asyncio.sleep(seconds)
    exchanges = sum(r.exchanges for r in replicas) - done
    wall, own = time.monotonic() - wall, time.process_time() - own
    after = servers.counters()
    delays = list(probe.delays_ms)
    while pending := [t for t in tasks if not t.done()]:  # redis-py can swallow a cancel
        for task in pending:
            task.cancel()
        await asyncio.wait(pending, timeout=0.1)
    await client.aclose()
    shards = [profile(b, a, exchanges, i) for b, a, i in zip(before, after, idle, strict=True)]
    return Window(wall, exchanges, own, delays, shards)


@contextmanager
def _topology(shards: int) -> Iterator[Servers]:
    if shards == 1:
        with running_redis() as server, redis.Redis.from_url(server.url) as client:
            yield Servers(server.url, [server.process.pid], [client])
    else:
        with running_cluster(shards) as cluster:
            clients = [redis.Redis(port=port) for port in cluster.ports]
            try:
                yield Servers(cluster.url, cluster.pids, clients)
            finally:
                for c in clients:
                    c.close()


def measure(fleet: Fleet, shards: int, seconds: float, code: str) -> RedisCost:
    """One run on a fresh standalone redis-server (`shards` 1) or cluster of masters.

    One process cannot keep the nominal rate, so the run's time is slowed to the rate it
    can keep: a first short run (with every time constant stretched 100 times, so no replica
    expires) measures the achieved rate, and the measured run stretches the TTL and the full
    refresh by nominal / achieved, as the intervals already are; otherwise replicas that
    cannot exchange within the TTL would expire and be sent again whole.
    """
    n = fleet.replicas
    with _topology(shards) as servers:
        idle = [0.0] * shards
        first = asyncio.run(_drive(replace(fleet, dilation=100.0), servers, 2.0, idle))
    rate = max(first.exchanges / first.wall, 1.0)
    fleet = replace(fleet, dilation=max(1.0, n / INTERVAL_S / rate))
    with _topology(shards) as servers:
        idle = idle_cpu_per_s(servers.pids, IDLE_S)
        # At least one epoch: each replica enters one epoch in the window (a window of an
        # epoch holds one lead), as at speed, not none or all of them by where it falls.
        period_s = epoch_lengths(TTL_S * fleet.dilation)[0]
        window = asyncio.run(_drive(fleet, servers, max(seconds, period_s), idle))
    wall, exchanges, own, delays = window.wall, window.exchanges, window.own_cpu_s, window.delays_ms
    quantiles = statistics.quantiles(delays, n=100) if len(delays) >= 2 else [float("nan")] * 99
    return RedisCost(
        code=code,
        topology="standalone" if shards == 1 else f"cluster of {shards}",
        replicas=n,
        endpoints=fleet.endpoints,
        seconds=wall,
        exchanges_per_s=exchanges / wall,
        nominal_per_s=n / INTERVAL_S,
        redis_cpu_per_exchange_us=[shard.cpu_us for shard in window.shards],
        replica_cpu_per_exchange_us=own / max(exchanges, 1) * 1e6,
        staleness_ms=(quantiles[49], quantiles[98], max(delays, default=float("nan"))),
        dilation=fleet.dilation,
        groups=fleet.groups,
        shards=window.shards,
    )


def load_module(path: str) -> ModuleType:
    """Another version of `data_plane/sync/in_flight_sharing.py`, imported from its file."""
    spec = importlib.util.spec_from_file_location("baseline_in_flight_sharing", path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CASES = (
    (64, 200, 1, GROUPS),
    (256, 1000, 3, CLUSTER_GROUPS),
)  # replicas, endpoints, shards, groups


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.scale.redis_cost")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--baseline-source", default="", help="an older in_flight_sharing.py")
    parser.add_argument("--case", type=int, choices=(0, 1), action="append")
    args = parser.parse_args(argv)
    codes: list[tuple[ModuleType, str]] = [(in_flight_sharing, "now")]
    if args.baseline_source:
        codes.insert(0, (load_module(args.baseline_source), "baseline"))
    for case in args.case or (0, 1):
        n, e, shards, groups = CASES[case]
        for module, code in codes:
            cost = measure(Fleet(module, n, e, groups), shards, args.seconds, code)
            print(json.dumps(asdict(cost)), flush=True)


if __name__ == "__main__":
    main()
