"""Section 3, loop rows: the same gearbox replays with the latency refit loop off and on, on
engines that never change (issue 27: a loop that refits a stationary fleet costs SLO).

A private redis-server, the table published to it, a data plane in Redis mode (feedback every
FEEDBACK_INTERVAL_S, the default probes), and the control plane's `FeedbackLoop` with the
table's policy (refit defaults: 200 samples, 600 s window) checking every CHECK_INTERVAL_S in a
thread of its own. The trace is replayed at each load with the loop off (table v1), then at
each load with the loop on; reported per load: budget attainment both ways and the tables the
loop published during the loop-on replay (target 0: nothing changed).
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import redis.asyncio as aioredis

from bench.common.machine import Pinning, pinned
from bench.common.processes import free_port, running
from bench.common.targets import gearbox_environment
from bench.quality.results import LoopRow
from bench.quality.score import grade
from bench.quality.trace import TraceRequest
from contracts.redis_keys import RedisKeys
from contracts.routing_table import RoutingTable
from control_plane.runtime.feedback_loop import FeedbackLoop
from control_plane.runtime.metrics import ControlPlaneMetrics
from control_plane.runtime.services import Services, make_services
from control_plane.settings import ControlPlaneSettings, RedisSettings
from demo.redis_launcher import private_redis

FEEDBACK_INTERVAL_S = 2.0
CHECK_INTERVAL_S = 5.0  # the default is 30 s; checks this often give the loop every chance
KEY_PREFIX = "bench-loop"


def _services(redis_url: str, table: RoutingTable) -> tuple[aioredis.Redis, Services]:
    redis = aioredis.Redis.from_url(redis_url)
    settings = ControlPlaneSettings(redis=RedisSettings(url=redis_url, key_prefix=KEY_PREFIX))
    return redis, make_services(redis, settings, lambda: datetime.now(UTC), table.policy)


async def _publish(redis_url: str, table: RoutingTable) -> int:
    redis, services = _services(redis_url, table)
    try:
        result = await services.publisher.publish(table)
        return result.version
    finally:
        await redis.aclose()


async def _current(redis_url: str, table: RoutingTable) -> int:
    redis, services = _services(redis_url, table)
    try:
        return await services.tables.current_version() or 0
    finally:
        await redis.aclose()


class LoopThread:
    """The refit loop on its own event loop in a thread, until `stop`."""

    def __init__(self, redis_url: str, table: RoutingTable) -> None:
        self._url, self._table = redis_url, table
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self.outcomes: list[str] = []

    async def _run(self) -> None:
        redis, services = _services(self._url, self._table)
        keys = RedisKeys(KEY_PREFIX)
        loop = FeedbackLoop(
            services, keys.feedback, ControlPlaneMetrics("bench"), lambda: datetime.now(UTC)
        )
        try:
            while not self._stop.is_set():
                await asyncio.sleep(CHECK_INTERVAL_S)
                self.outcomes.append((await loop.check_once()).value)
        finally:
            await redis.aclose()

    def __enter__(self) -> LoopThread:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=CHECK_INTERVAL_S + 30)


@contextmanager
def redis_data_plane(
    workdir: Path, table: RoutingTable, redis_url: str, pinning: Pinning
) -> Iterator[str]:
    """The data plane on the proxy core in Redis mode (table from Redis, feedback written)."""
    snapshot = workdir / "loop-table.json"
    snapshot.write_text(table.model_dump_json())
    port = free_port()
    env = gearbox_environment(port, snapshot, None, redis_url)
    env.update(
        {
            "GEARBOX_DP_REDIS_KEY_PREFIX": KEY_PREFIX,
            "GEARBOX_DP_FEEDBACK_INTERVAL_S": str(FEEDBACK_INTERVAL_S),
            "GEARBOX_DP_INSTANCE_ID": "bench-loop-dp",
        }
    )
    args = pinned([sys.executable, "-m", "data_plane", "serve"], pinning.proxy)
    with running(args, workdir / "loop-data-plane.log", env=env, port=port):
        yield f"http://127.0.0.1:{port}"


def run_loop_rows(
    workdir: Path,
    table: RoutingTable,
    trace: Sequence[TraceRequest],
    loads: Sequence[float],
    nominal_rps: float,
    prices: dict[str, tuple[float, float]],
    pinning: Pinning,
) -> tuple[LoopRow, ...]:
    """Gearbox at each load with the loop off, then on (see the module docstring)."""
    from bench.quality.section import check_serving, replay_policy

    workdir.mkdir(parents=True, exist_ok=True)
    off: dict[float, float] = {}
    rows = []
    with private_redis() as redis_url:
        asyncio.run(_publish(redis_url, table))
        with redis_data_plane(workdir, table, redis_url, pinning) as url:
            check_serving(url, trace[0])
            for load in loads:
                print(f"     replay gearbox, refit loop off, at {load:g}x", flush=True)
                results, _ = replay_policy(workdir, url, trace, "gearbox", load, pinning.aux)
                graded = grade("gearbox", load, nominal_rps * load, trace, results, prices)
                off[load] = graded.budget_attainment
            with LoopThread(redis_url, table):
                for load in loads:
                    print(f"     replay gearbox, refit loop on, at {load:g}x", flush=True)
                    before = asyncio.run(_current(redis_url, table))
                    results, _ = replay_policy(workdir, url, trace, "gearbox", load, pinning.aux)
                    time.sleep(FEEDBACK_INTERVAL_S + CHECK_INTERVAL_S)  # the last window judged
                    after = asyncio.run(_current(redis_url, table))
                    graded = grade("gearbox", load, nominal_rps * load, trace, results, prices)
                    rows.append(
                        LoopRow(
                            load, len(trace), off[load], graded.budget_attainment, after - before
                        )
                    )
    return tuple(rows)
