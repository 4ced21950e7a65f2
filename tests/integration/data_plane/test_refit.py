"""Latency feedback closes the loop end to end: a simulated engine slowed 3x at run time ->
the data plane's feedback shows the drift -> the control plane publishes a refit table ->
traffic moves away (docs/control_plane.md "Latency feedback")."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
import redis.asyncio as aioredis

from contracts.policy import Policy, RefitPolicy
from contracts.redis_keys import RedisKeys
from contracts.routing_table import RoutingTable
from control_plane.loop.drift import Correction, RefitCheck
from control_plane.loop.refit import apply_refit
from control_plane.runtime.feedback_loop import FeedbackLoop
from control_plane.runtime.metrics import ControlPlaneMetrics
from control_plane.runtime.services import make_services
from control_plane.settings import ControlPlaneSettings, RedisSettings
from control_plane.store.published_tables import PublishedTables
from data_plane.app import PROBE
from simulator import FaultConfig, Fleet, SimFleetConfig, SimPairConfig, run_fleet
from tests.component.data_plane.fakes import make_table, pair_entry
from tests.integration.data_plane.conftest import MakePlane, Plane
from tests.support.redis_server import RedisProcess
from tests.support.waiting import eventually, within_evidence

pytestmark = pytest.mark.integration

CHEAP, PRICEY = "sim-int4", "sim-fp16"
BUDGET_MS = 250  # both engines answer 10 tokens in ~0.12 s; 3x slower misses it
# The defaults but for the counts and times a test can wait for. A first refit that still
# mixes pre-slowdown samples under-corrects; the next window (the new version's) refits again.
REFIT = RefitPolicy(min_samples=30, prior_samples=30, window_s=60, min_interval_s=0)
# The budget routes here (a 3x slower engine misses it); the deadline is not under test. On a
# loaded 2-core machine this process (client, router, engines) stalls up to ~1.2 s at times,
# and a healthy 0.12 s answer then ran past 250 ms + the 0.5 s default grace: a 504.
GRACE_S = 10.0


@pytest.fixture
async def engines() -> AsyncIterator[Fleet]:
    pairs = [
        SimPairConfig(name=n, family="fam", quantization=q, ttft_base_s=0.02, tpot_base_s=0.01)
        for n, q in ((CHEAP, "int4"), (PRICEY, "fp16"))
    ]
    async with run_fleet(SimFleetConfig(pairs=pairs), answers={}) as running:
        yield running


def profiled_table(fleet: Fleet) -> RoutingTable:
    """What a profile of the healthy engines says: 0.025 + 10 x 0.0095 = 0.12 s."""
    entries = [
        pair_entry(
            "fam",
            q,
            urls=[fleet.url(n)],
            usd_per_mtok=price,
            served_model_name=n,
            ttft_base_s=0.025,
            tpot_base_s=0.0095,
        )
        for n, q, price in ((CHEAP, "int4", 1.0), (PRICEY, "fp16", 4.0))
    ]
    return make_table(entries)


class Publishing:
    @staticmethod
    def tables(redis: aioredis.Redis, keys: RedisKeys) -> PublishedTables:
        return PublishedTables(redis, keys)


class Traffic:
    """One client sending requests back to back; records (time, serving pair)."""

    def __init__(self, plane: Plane) -> None:
        self.plane = plane
        self.served: list[tuple[float, str]] = []

    async def one(self) -> str:
        body = json.dumps(
            {"model": "auto", "max_tokens": 10, "messages": [{"role": "user", "content": "Hi"}]}
        )
        headers = {"X-Latency-Budget-Ms": str(BUDGET_MS)}
        resp = await self.plane.client.post("/v1/chat/completions", data=body, headers=headers)
        assert resp.status == 200, await resp.text()
        await resp.read()
        pair = resp.headers["X-Route-Pair"]
        self.served.append((time.monotonic(), pair))
        return pair

    async def run(self) -> None:
        while True:
            await self.one()

    def on_pricey(self) -> bool:
        """The last answer came from the pricey pair (traffic moved away from the cheap one)."""
        return self.served[-1][1] == "fam@fp16"


async def stop(*tasks: asyncio.Task[None]) -> None:
    """Cancel the senders and the loop; a sender that failed (a 429, a 504) says so here
    rather than as a wait that ran out of answers. Cancelled again until each has ended, as
    the data plane's shutdown does (`BackgroundTasks.stop`): one run of this module beside
    other suites hung until pytest's 300 s with its event loop idle, and its refit loop was
    still running at teardown ("refit check failed: ConnectionError" as its client closed),
    which is what a lost cancel here does (not proven to be the cause)."""
    async with asyncio.timeout(20.0):
        while pending := [t for t in tasks if not t.done()]:
            for task in pending:
                task.cancel()
            await asyncio.wait(pending, timeout=0.5)
    for result in await asyncio.gather(*tasks, return_exceptions=True):
        if isinstance(result, Exception):
            raise result


def running(*tasks: asyncio.Task[None]) -> None:
    """Fail at once, with its error, when a sender or the loop stopped (a 504, a 429, a Redis
    error): the waits count answers, and a dead sender adds none, so without this the wait ran
    to its 180 s safety net (one full-suite run went past pytest's 300 s in this module)."""
    for task in tasks:
        if task.done():
            task.result()  # raises what stopped it
            raise AssertionError(f"{task.get_coro()!r} returned; it runs until cancelled")


def control_plane_loop(
    redis: aioredis.Redis, keys: RedisKeys, url: str, refit: RefitPolicy = REFIT
) -> FeedbackLoop:
    settings = ControlPlaneSettings(redis=RedisSettings(url=url, key_prefix=keys.prefix))
    services = make_services(redis, settings, lambda: datetime.now(UTC), Policy(refit=refit))
    return FeedbackLoop(
        services, keys.feedback, ControlPlaneMetrics("test"), lambda: datetime.now(UTC)
    )


async def test_a_slowed_pair_is_refit_and_traffic_moves_away(
    make_plane: MakePlane,
    engines: Fleet,
    redis_client: aioredis.Redis,
    redis_keys: RedisKeys,
    redis_server: RedisProcess,
) -> None:
    plane = await make_plane(feedback_interval_s=0.2, deadline_grace_s=GRACE_S)
    v1 = await plane.publisher.publish(profiled_table(engines))
    await eventually(lambda: plane.version == v1, what="table loaded")
    loop = control_plane_loop(redis_client, redis_keys, redis_server.url)
    traffic = Traffic(plane)

    # Healthy: the cheap pair serves, feedback agrees with the table, no refit.
    assert {await traffic.one() for _ in range(40)} == {"fam@int4"}
    await asyncio.sleep(0.5)  # two feedback intervals
    assert await loop.check_once() is RefitCheck.NO_DRIFT

    engines.set_faults(CHEAP, FaultConfig(slowdown_factor=3.0))
    slowed_at, healthy = time.monotonic(), len(traffic.served)
    sender = asyncio.create_task(traffic.run())
    refits = asyncio.create_task(loop.run(0.25))

    def answers() -> int:  # since the slowdown: the evidence the refit waits on
        running(sender, refits)
        return len(traffic.served) - healthy

    try:
        # ~25 answers here (with the 40 healthy ones, 30 per fold of the window)
        await within_evidence(lambda: (plane.version or 0) > v1, answers, 100, "refit published")
        refit_s, refit_n = time.monotonic() - slowed_at, answers()
        await within_evidence(traffic.on_pricey, answers, 100, "traffic moved")
        moved_s, moved_n = time.monotonic() - slowed_at, answers()
    finally:
        await stop(sender, refits)

    first = await Publishing.tables(redis_client, redis_keys).get(v1 + 1)
    assert first is not None
    assert first.refit is not None
    assert first.refit.note.startswith("refit from live traffic: ")
    assert first.refit.base_version == v1
    assert set(first.refit.pairs) == {"fam@int4"}
    assert first.refit.pairs["fam@int4"].observed_e2e_ratio > 2.0  # ~3x at p95
    assert {await traffic.one() for _ in range(20)} == {"fam@fp16"}  # and it stays moved
    print(
        f"first refit {refit_s:.1f} s ({refit_n} answers), traffic moved {moved_s:.1f} s "
        f"({moved_n} answers) after the slowdown"
    )


async def test_a_pair_refit_slower_is_probed_and_refit_back(
    make_plane: MakePlane,
    engines: Fleet,
    redis_client: aioredis.Redis,
    redis_keys: RedisKeys,
    redis_server: RedisProcess,
) -> None:
    """Refits go both ways: a refit made the cheap pair 3x slower than its (healthy) engine,
    so no budgeted request goes to it and no client answer can show it recovered. The data
    plane probes it (`refit.slowed`), the feedback shows it faster than the table, and the
    loop refits it back until traffic returns."""
    plane = await make_plane(
        feedback_interval_s=0.2, latency_probe_interval_s=0.02, deadline_grace_s=GRACE_S
    )
    v1 = await plane.publisher.publish(profiled_table(engines))
    await eventually(lambda: plane.version == v1, what="table loaded")
    base = await Publishing.tables(redis_client, redis_keys).get(v1)
    assert base is not None
    slower = Correction("fam@int4", 100, 3.0, 3.0, 3.0, e2e_factor=3.0)
    v2 = await plane.publisher.publish(apply_refit(base, [slower], 60.0, datetime.now(UTC)))
    await eventually(lambda: plane.version == v2, what="slower refit loaded")
    traffic = Traffic(plane)
    assert await traffic.one() == "fam@fp16"  # 0.36 s predicted: over the 250 ms budget
    loop = control_plane_loop(redis_client, redis_keys, redis_server.url)
    refits = asyncio.create_task(loop.run(0.25))
    probes = plane.app[PROBE]

    async def served_cheap() -> bool:
        return await traffic.one() == "fam@int4"

    def probes_sent() -> int:
        running(refits)
        return probes.sent

    try:
        # ~60-90 probes (30 per fold of the window), ~5 a second unloaded: 13-17 s under two
        # CPU hogs, so a 20 s deadline failed on a loaded machine. The bound is on the probes.
        await within_evidence(lambda: (plane.version or 0) > v2, probes_sent, 240, "refit back")
        # a few refits may be needed to come all the way
        await within_evidence(served_cheap, probes_sent, 480, "traffic back")
    finally:
        await stop(refits)
    assert traffic.served[-1][1] == "fam@int4"
    back = await Publishing.tables(redis_client, redis_keys).get(v2 + 1)
    assert back is not None
    assert back.refit is not None
    assert back.refit.pairs["fam@int4"].observed_e2e_ratio < 0.75  # faster than the table
    assert probes.sent > 0


async def test_a_refit_that_under_corrects_a_slowdown_is_refit_further_not_reverted(
    make_plane: MakePlane,
    engines: Fleet,
    redis_client: aioredis.Redis,
    redis_keys: RedisKeys,
    redis_server: RedisProcess,
) -> None:
    """The bench's "traffic never moved" run: a first refit that under-corrects a slowdown
    (here x1.3: 0.156 s predicted, still in the 250 ms budget) leaves the cheap pair its
    traffic, which now misses the budget, while the base table's answers in the window are
    the healthy engine's. The watch must not take that fall for the refit's doing: the pair
    still reads slower on the refit table, so the loop refits further and traffic moves
    (the watch judges as soon as a refit can be computed: watch_min_samples = min_samples)."""
    plane = await make_plane(feedback_interval_s=0.2, deadline_grace_s=GRACE_S)
    tables = Publishing.tables(redis_client, redis_keys)
    v1 = await plane.publisher.publish(profiled_table(engines))
    await eventually(lambda: plane.version == v1, what="table loaded")
    traffic = Traffic(plane)
    assert {await traffic.one() for _ in range(40)} == {"fam@int4"}  # healthy, in budget

    engines.set_faults(CHEAP, FaultConfig(slowdown_factor=3.0))
    base = await tables.get(v1)
    assert base is not None
    mild = Correction("fam@int4", 40, 1.3, 1.3, 1.3, e2e_factor=1.3)
    v2 = await plane.publisher.publish(apply_refit(base, [mild], 60.0, datetime.now(UTC)))
    await eventually(lambda: plane.version == v2, what="mild refit loaded")
    watching = REFIT.model_copy(update={"watch_min_samples": REFIT.min_samples})
    loop = control_plane_loop(redis_client, redis_keys, redis_server.url, watching)
    tasks = [asyncio.create_task(traffic.run()) for _ in range(4)]
    tasks.append(asyncio.create_task(loop.run(0.25)))
    mild_at = len(traffic.served)

    def answers() -> int:  # on the mild refit: the evidence the next table waits on
        running(*tasks)
        return len(traffic.served) - mild_at

    try:
        # ~110-140 answers (a cell with 30 per fold of the window; 4 senders spread the load)
        await within_evidence(lambda: (plane.version or 0) > v2, answers, 500, "next table")
        await within_evidence(traffic.on_pricey, answers, 600, "traffic moved")
    finally:
        await stop(*tasks)
    after = await tables.get(v2 + 1)
    assert after is not None
    assert after.refit is not None
    assert after.refit.reverted_version is None, after.refit.note
    assert after.refit.base_version == v2
    assert after.refit.slowed["fam@int4"] > 1.3  # corrected further than the first refit
