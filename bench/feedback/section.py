"""Section 5: latency feedback closes the loop: an engine slowed 3x at run time is refit and
traffic moves away, with the times it takes.

In one process and event loop: a private redis-server, two simulated engines of one family
(`int4`, cheap, and `fp16`, four times the price, equally fast), the data plane (`create_app`
on real loopback HTTP) and the control plane's refit loop (`FeedbackLoop` on its production
services). Closed-loop clients send requests with a 250 ms budget (both engines answer in about
120 ms); after a warm-up the cheap engine is slowed 3x. Reported: seconds from the slowdown to
the first refit table, and to the moment the slowed pair serves none of the last 20 answers;
each pair's share and the budget attainment before, during and after.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime

import aiohttp
import redis.asyncio as aioredis

from bench.common.in_process import Profiled, data_plane, int4_fp16_table
from bench.common.processes import free_port
from contracts.policy import Policy, RefitPolicy
from contracts.redis_keys import RedisKeys
from control_plane.runtime.feedback_loop import FeedbackLoop
from control_plane.runtime.metrics import ControlPlaneMetrics
from control_plane.runtime.services import Services, make_services
from control_plane.settings import ControlPlaneSettings
from control_plane.settings import RedisSettings as ControlPlaneRedis
from data_plane.settings import (
    DataPlaneSettings,
    FeedbackSettings,
    RedisSettings,
    ServerSettings,
    TableSettings,
)
from demo.redis_launcher import private_redis
from simulator import FaultConfig, Fleet, SimFleetConfig, SimPairConfig, run_fleet

SLOWED, OTHER = "fam@int4", "fam@fp16"
BUDGET_MS = 250
CLIENTS = 4
REFIT = RefitPolicy(min_samples=100, prior_samples=100, window_s=120, min_interval_s=0)
FEEDBACK_INTERVAL_S = 1.0
CHECK_INTERVAL_S = 1.0
LAST_N = 20


@dataclass(frozen=True, slots=True)
class Phase:
    name: str
    requests: int
    share_slowed: float
    budget_attainment: float


@dataclass(frozen=True, slots=True)
class FeedbackResult:
    refit_s: float  # slowdown -> first refit table served by the data plane
    moved_s: float  # slowdown -> the slowed pair serves none of the last LAST_N answers
    refits: int
    phases: tuple[Phase, ...]
    notes: tuple[str, ...] = field(default=())


# What a profile of the healthy engines says: 0.025 + 10 x 0.0095 = 0.12 s.
PROFILED = Profiled(ttft_base_s=0.025, tpot_base_s=0.0095)


@asynccontextmanager
async def data_plane_server(
    url: str, keys: RedisKeys, feedback: FeedbackSettings | None = None
) -> AsyncIterator[str]:
    port = free_port()
    settings = DataPlaneSettings(
        server=ServerSettings(host="127.0.0.1", port=port),
        redis=RedisSettings(url=url, key_prefix=keys.prefix),
        instance_id="bench-dp", table=TableSettings(poll_interval_s=0.5),
        # A latency scenario: no canary items (on by default) unless the caller sends them.
        feedback=feedback
        or FeedbackSettings(interval_s=FEEDBACK_INTERVAL_S, canary_items_per_minute=0.0),
        log_level="WARNING",
    )  # fmt: skip
    async with data_plane(settings):
        yield f"http://127.0.0.1:{port}"


class Clients:
    """Closed-loop clients; each answer is (time, pair, met budget)."""

    def __init__(self, url: str) -> None:
        self.url = url + "/v1/chat/completions"
        self.answers: list[tuple[float, str, bool]] = []
        self.version_seen: list[tuple[float, str]] = []

    async def one(self, session: aiohttp.ClientSession) -> None:
        body = {"model": "auto", "max_tokens": 10, "messages": [{"role": "user", "content": "Hi"}]}
        started = time.monotonic()
        async with session.post(
            self.url, json=body, headers={"X-Latency-Budget-Ms": str(BUDGET_MS)}
        ) as resp:
            await resp.read()
            done = time.monotonic()
            met = resp.status == 200 and done - started <= BUDGET_MS / 1000
            self.answers.append((done, resp.headers.get("X-Route-Pair", ""), met))
            self.version_seen.append((done, resp.headers.get("X-Route-Table-Version", "")))

    async def run(self, session: aiohttp.ClientSession) -> None:
        while True:
            await self.one(session)


def _phase(name: str, answers: list[tuple[float, str, bool]]) -> Phase:
    n = len(answers)
    return Phase(
        name,
        n,
        sum(1 for _, p, _ in answers if p == SLOWED) / n if n else 0.0,
        sum(1 for *_, met in answers if met) / n if n else 0.0,
    )


def _moved_at(answers: list[tuple[float, str, bool]], after: float) -> float | None:
    recent = [a for a in answers if a[0] > after]
    for i in range(LAST_N, len(recent) + 1):
        if all(p != SLOWED for _, p, _ in recent[i - LAST_N : i]):
            return recent[i - 1][0]
    return None


async def _measure(fleet: Fleet, url: str, timeout_s: float) -> FeedbackResult:
    keys = RedisKeys("bench")
    redis = aioredis.Redis.from_url(url)
    settings = ControlPlaneSettings(redis=ControlPlaneRedis(url=url, key_prefix=keys.prefix))
    services = make_services(redis, settings, lambda: datetime.now(UTC), Policy(refit=REFIT))
    loop = FeedbackLoop(
        services, keys.feedback, ControlPlaneMetrics("bench"), lambda: datetime.now(UTC)
    )
    try:
        await services.publisher.publish(int4_fp16_table(fleet, PROFILED))
        async with data_plane_server(url, keys) as dp, aiohttp.ClientSession() as session:
            clients = Clients(dp)
            while not (clients.version_seen and clients.version_seen[-1][1] == "1"):
                await clients.one(session)
            tasks = [asyncio.create_task(clients.run(session)) for _ in range(CLIENTS)]
            tasks.append(asyncio.create_task(loop.run(CHECK_INTERVAL_S)))
            try:
                await asyncio.sleep(10.0)  # warm-up: healthy feedback, no refit expected
                fleet.set_faults("sim-int4", FaultConfig(slowdown_factor=3.0))
                slowed_at = time.monotonic()
                for _ in range(int(timeout_s / 0.5)):  # bounded wait for the move
                    if _moved_at(clients.answers, slowed_at) is not None:
                        break
                    await asyncio.sleep(0.5)
                await asyncio.sleep(5.0)  # after the move
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
        current = await services.tables.current()
        history = await _history(services, current.version if current else 1)
    finally:
        await redis.aclose()
    refit_at = next(
        (t for t, v in clients.version_seen if t > slowed_at and v not in ("", "1")), None
    )
    moved_at = _moved_at(clients.answers, slowed_at)
    answers = clients.answers
    return FeedbackResult(
        refit_s=(refit_at - slowed_at) if refit_at else float("nan"),
        moved_s=(moved_at - slowed_at) if moved_at else float("nan"),
        refits=(current.version - 1) if current else 0,
        phases=(
            _phase("healthy (before the slowdown)", [a for a in answers if a[0] <= slowed_at]),
            _phase(
                "slowed, before traffic moved",
                [a for a in answers if slowed_at < a[0] <= (moved_at or float("inf"))],
            ),
            _phase("after traffic moved", [a for a in answers if moved_at and a[0] > moved_at]),
        ),
        notes=(
            f"Refit policy: min_samples {REFIT.min_samples}, prior_samples {REFIT.prior_samples}, "
            f"threshold {REFIT.drift_threshold_ratio}; feedback every {FEEDBACK_INTERVAL_S:g} s, "
            f"checks every {CHECK_INTERVAL_S:g} s, {CLIENTS} closed-loop clients.",
            *history,
        ),
    )


async def _history(services: Services, last: int) -> list[str]:
    """One note per table the loop published (v2 .. `last`): its refit note and the slowed
    pairs' factors, so a run where traffic did not move says which table kept it."""
    notes = []
    for version in range(2, last + 1):
        table = await services.tables.get(version)
        if table is not None and table.refit is not None:
            slowed = ", ".join(f"{p} x{f:.2f}" for p, f in table.refit.slowed.items())
            notes.append(f"v{version}: {table.refit.note} (slowed: {slowed or 'none'})")
    return notes


async def _run(timeout_s: float) -> FeedbackResult:
    pairs = [
        SimPairConfig(name=f"sim-{q}", family="fam", quantization=q, ttft_base_s=0.02,
                      tpot_base_s=0.01, max_running=64)
        for q in ("int4", "fp16")
    ]  # fmt: skip
    with private_redis() as url:
        async with run_fleet(SimFleetConfig(pairs=pairs), answers={}) as fleet:
            return await _measure(fleet, url, timeout_s)


def run_feedback(timeout_s: float = 120.0) -> FeedbackResult:
    return asyncio.run(_run(timeout_s))
