"""Section 5b: a pair whose accuracy drops 15 points at run time shows in shadow re-asks at a
given sample rate, and is demoted on canary items (held-out math items the data plane sends
each pair, `CANARY_PER_MINUTE`; agreement never demotes: docs/accuracy.md "Canary items");
the times it takes.

In one process, as `bench.feedback.section`: a private redis-server, two simulated engines of one
family answering a math answer key (`fp16`, the reference, 0.97 right; `int8`, cheaper, 0.90),
the data plane and the control plane's refit loop. Four closed-loop clients ask math questions
with an accuracy floor of 0.85, so `int8` serves; `SAMPLE_RATE` of its answers are re-asked on
`fp16`. After a warm-up `int8` loses 15 points (`accuracy_drop`). Reported: seconds from the
drop until the agreement's upper bound falls below the least agreement the profile's bound
implies (the alert's condition, docs/accuracy.md "Live checks"), and until the demoted table
moves floor-0.85 traffic to `fp16`; demotions during the healthy warm-up (the loop checks every
0.5 s; target 0); checks and their cost (canary items' cost included).
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import redis.asyncio as aioredis

from bench.common.in_process import Profiled, family_entry, family_table
from bench.feedback.section import FEEDBACK_INTERVAL_S, data_plane_server
from contracts.policy import AccuracyCheckPolicy, Policy, RefitPolicy
from contracts.redis_keys import RedisKeys
from contracts.routing_table import RoutingTable
from control_plane.loop.drift import RefitCheck
from control_plane.runtime.feedback_loop import FeedbackLoop
from control_plane.runtime.metrics import ControlPlaneMetrics
from control_plane.runtime.services import Services, make_services
from control_plane.settings import ControlPlaneSettings, RedisSettings
from data_plane.settings import FeedbackSettings
from demo.redis_launcher import private_redis
from simulator import FaultConfig, Fleet, SimFleetConfig, SimPairConfig, run_fleet
from simulator.answer_key import KnownAnswer, load_answer_keys

SAMPLE_RATE = 0.25
CANARY_PER_MINUTE = 600.0  # per pair: 10 a second, so a decision within the 120 s watched
HOLDOUT_MATH = Path(__file__).parents[2] / "profiler" / "evalsets" / "holdout" / "math.jsonl"
CANARIES = FeedbackSettings(
    interval_s=FEEDBACK_INTERVAL_S,
    canary_items_per_minute=CANARY_PER_MINUTE,
    canary_usd_per_hour=1.0,
    canary_items_file=str(HOLDOUT_MATH),
)
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
    upper_at_detection: float  # the canary items' upper bound when detected
    expected: float  # the profile's bound it fell below
    healthy_demotions: int = 0  # demotions published while int8 was healthy


PROFILE_BOUND = 0.90  # int8's profile accuracy; the table has no bounds, so floors compare it
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


def _canary_upper(metrics: ControlPlaneMetrics) -> float:
    labels = {"pair": CHECKED, "category": "math", "side": "upper"}
    value = metrics.registry.get_sample_value("gearbox_cp_canary_accuracy_bound_ratio", labels)
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
    """Check every 0.5 s until the traffic moved (or 120 s): (detected_s, the canary items'
    upper bound and the profile's bound at detection, moved_s). Detected: the canaries'
    upper bound below the profile's bound, the demotion's condition (with `min_checks`)."""
    detected_s, upper, expected_at = math.nan, math.nan, math.nan
    for _ in range(240):
        await loop.check_once()
        up = _canary_upper(metrics)
        if math.isnan(detected_s) and up < PROFILE_BOUND:
            detected_s, upper, expected_at = time.monotonic() - dropped_at, up, PROFILE_BOUND
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
    async with (
        data_plane_server(url, keys, CANARIES) as dp,
        aiohttp.ClientSession() as session,
    ):
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
        if line.startswith(("gearbox_accuracy_checks_total{", "gearbox_canary_items_total{"))
        and 'outcome="dropped"' not in line
        and 'outcome="over_budget"' not in line
    )
    cost = sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(
            ("gearbox_accuracy_check_cost_usd_total{", "gearbox_canary_cost_usd_total{")
        )
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
            answers = {**ANSWERS, **load_answer_keys([HOLDOUT_MATH])}
            async with run_fleet(SimFleetConfig(pairs=pairs), answers=answers) as fleet:
                return await _measure(fleet, services, url, keys)
        finally:
            await redis.aclose()


def run_accuracy_drift() -> AccuracyDriftResult:
    return asyncio.run(_run())
