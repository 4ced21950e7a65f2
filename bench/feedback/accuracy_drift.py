"""Section 5b: a pair whose accuracy drops 15 points at run time is caught by shadow re-asks at
a given sample rate, and demoted; the times it takes.

In one process, as `bench.feedback.section`: a private redis-server, two simulated engines of one
family answering a math answer key (`fp16`, the reference, 0.97 right; `int8`, cheaper, 0.90),
the data plane and the control plane's refit loop. Four closed-loop clients ask math questions
with an accuracy floor of 0.85, so `int8` serves; `SAMPLE_RATE` of its answers are re-asked on
`fp16`. After a warm-up `int8` loses 15 points (`accuracy_drop`). Reported: seconds from the
drop until the agreement's upper bound falls below the least agreement the profile's bound
implies (the alert's condition, docs/accuracy.md "Live checks"), and until the demoted table
moves floor-0.85 traffic to `fp16`; demotions during the healthy warm-up (the loop checks every
0.5 s; target 0); checks and their cost.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime

import aiohttp
import redis.asyncio as aioredis

from bench.common.in_process import Profiled, family_entry, family_table
from bench.feedback.section import data_plane_server
from contracts.policy import AccuracyCheckPolicy, Policy, RefitPolicy
from contracts.redis_keys import RedisKeys
from contracts.routing_table import RoutingTable
from control_plane.loop.drift import RefitCheck
from control_plane.runtime.feedback_loop import FeedbackLoop
from control_plane.runtime.metrics import ControlPlaneMetrics
from control_plane.runtime.services import Services, make_services
from control_plane.settings import ControlPlaneSettings, RedisSettings
from demo.redis_launcher import private_redis
from simulator import FaultConfig, Fleet, SimFleetConfig, SimPairConfig, run_fleet
from simulator.answer_key import KnownAnswer

SAMPLE_RATE = 0.25
DROP = 0.15
CHECKED, REFERENCE = "fam@int8", "fam@fp16"
PROMPTS = [f"Compute {a} * 3 + {a % 17} (case {a})." for a in range(5000)]
ANSWERS = {p: KnownAnswer("math", str(a * 3 + a % 17)) for a, p in enumerate(PROMPTS)}
CHECKS = AccuracyCheckPolicy(
    sample_rate=SAMPLE_RATE, max_checks_per_hour=100_000, min_checks=100, demote=True
)
POLICY = Policy(
    accuracy_check=CHECKS, refit=RefitPolicy(min_samples=10**9, window_s=600, min_interval_s=0)
)


@dataclass(frozen=True, slots=True)
class AccuracyDriftResult:
    sample_rate: float
    detected_s: float  # drop -> upper bound below the implied agreement
    demoted_s: float  # drop -> the checked pair serves none of the last 20 answers
    checks: int
    check_cost_usd: float
    upper_at_detection: float
    expected: float
    healthy_demotions: int = 0  # demotions published while int8 was healthy


PROFILED = Profiled(ttft_base_s=0.05, tpot_base_s=0.001, accuracy_n=400)


def _table(fleet: Fleet) -> RoutingTable:
    entries = [
        family_entry("int8", fleet.url("sim-int8"), 1.0, replace(PROFILED, accuracy=0.90)),
        family_entry("fp16", fleet.url("sim-fp16"), 4.0, replace(PROFILED, accuracy=0.97)),
    ]
    return family_table(entries, policy=POLICY, baselines={"fam": REFERENCE})


class Clients:
    def __init__(self, url: str) -> None:
        self.url = url + "/v1/chat/completions"
        self.served: list[tuple[float, str]] = []
        self._next = 0

    async def run(self, session: aiohttp.ClientSession) -> None:
        headers = {"X-Task-Category": "math", "X-Min-Accuracy": "0.85"}
        while True:
            prompt = PROMPTS[self._next % len(PROMPTS)]
            self._next += 1
            body = {
                "model": "auto",
                "max_tokens": 8,
                "messages": [{"role": "user", "content": prompt}],
            }
            async with session.post(self.url, json=body, headers=headers) as resp:
                await resp.read()
                self.served.append((time.monotonic(), resp.headers.get("X-Route-Pair", "")))


def _gauge(metrics: ControlPlaneMetrics, name: str) -> float:
    value = metrics.registry.get_sample_value(name, {"pair": CHECKED, "category": "math"})
    return math.nan if value is None else value


async def _healthy(loop: FeedbackLoop, seconds: float) -> int:
    """Check every 0.5 s while the fleet is healthy; the demotions published meanwhile."""
    demotions = 0
    for _ in range(round(seconds / 0.5)):
        demotions += await loop.check_once() is RefitCheck.DEMOTED
        await asyncio.sleep(0.5)
    return demotions


async def _watch(
    loop: FeedbackLoop, metrics: ControlPlaneMetrics, clients: Clients, dropped_at: float
) -> tuple[float, float, float, float]:
    """Check every 0.5 s until the traffic moved (or 120 s): (detected_s, upper, expected at
    detection, moved_s)."""
    detected_s, upper, expected_at = math.nan, math.nan, math.nan
    for _ in range(240):
        await loop.check_once()
        up, expected = (
            _gauge(metrics, n)
            for n in (
                "gearbox_cp_live_agreement_upper_ratio",
                "gearbox_cp_expected_agreement_ratio",
            )
        )
        if math.isnan(detected_s) and up < expected:
            detected_s, upper, expected_at = time.monotonic() - dropped_at, up, expected
        recent = [p for t, p in clients.served[-20:] if t > dropped_at]
        if len(recent) == 20 and CHECKED not in recent:
            return detected_s, upper, expected_at, clients.served[-1][0] - dropped_at
        await asyncio.sleep(0.5)
    return detected_s, upper, expected_at, math.nan


async def _measure(
    fleet: Fleet, services: Services, url: str, keys: RedisKeys
) -> AccuracyDriftResult:
    metrics = ControlPlaneMetrics("bench")
    loop = FeedbackLoop(services, keys.feedback, metrics, lambda: datetime.now(UTC))
    await services.policies.put(POLICY)
    await services.publisher.publish(_table(fleet))
    async with data_plane_server(url, keys) as dp, aiohttp.ClientSession() as session:
        await asyncio.sleep(1.5)  # the data plane loads v1
        clients = Clients(dp)
        tasks = [asyncio.create_task(clients.run(session)) for _ in range(4)]
        try:
            healthy_demotions = await _healthy(loop, 10.0)  # warm-up: healthy agreement
            fleet.set_faults("sim-int8", FaultConfig(accuracy_drop=DROP))
            dropped_at = time.monotonic()
            detected_s, upper, expected, moved_s = await _watch(loop, metrics, clients, dropped_at)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        async with session.get(dp + "/metrics") as resp:
            text = await resp.text()
    checks = sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("gearbox_accuracy_checks_total{") and 'outcome="dropped"' not in line
    )
    cost = sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("gearbox_accuracy_check_cost_usd_total{")
    )
    return AccuracyDriftResult(
        SAMPLE_RATE, detected_s, moved_s, int(checks), cost, upper, expected, healthy_demotions
    )


async def _run() -> AccuracyDriftResult:
    pairs = [
        SimPairConfig(name=f"sim-{q}", family="fam", quantization=q, ttft_base_s=0.002,
                      tpot_base_s=0.002, accuracy={"math": acc}, seed=seed, max_running=64)
        for q, acc, seed in (("fp16", 0.97, 1), ("int8", 0.90, 2))
    ]  # fmt: skip
    keys = RedisKeys("bench-acc")
    with private_redis() as url:
        redis = aioredis.Redis.from_url(url)
        settings = ControlPlaneSettings(redis=RedisSettings(url=url, key_prefix=keys.prefix))
        services = make_services(redis, settings, lambda: datetime.now(UTC), None)
        try:
            async with run_fleet(SimFleetConfig(pairs=pairs), answers=ANSWERS) as fleet:
                return await _measure(fleet, services, url, keys)
        finally:
            await redis.aclose()


def run_accuracy_drift() -> AccuracyDriftResult:
    return asyncio.run(_run())
