"""Scenario 4: a tenant's burst at 3x the fleet's capacity, over a steady tenant, with every
request drawn critical, standard or batch (the client stands for a trusted gateway, so its
`X-Priority` counts).

Two simulated engines of one family (`int4`, cheap, and `fp16`, four times the price) whose
time per token grows with the requests decoding beside it, in a table that says exactly that
(the simulator's truth, not a profile of it). Every request asks for `MAX_TOKENS` tokens with a
`BUDGET_MS` budget. The fleet's capacity is what both engines sustain with every request in
its budget (`capacity_rps`). Open-loop (Poisson) arrivals from one seeded schedule: the
steady tenant at `STEADY_SHARE` of capacity, the bursty one at `BURSTY_SHARE`, and at
`BURST_TIMES` capacity in the middle third of the run. Run with flow control as shipped, and
with `FLOW_QUEUE=false` (refused at once instead of queued) for the router's CPU time that
the queue adds.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from bench.admission.stack import (
    QUEUE_OFF,
    TRUSTED,
    Busy,
    Router,
    Sample,
    bucket_quantile,
    post,
    router,
    sample_sum,
    session,
    wait_histogram,
    watch_running,
)
from bench.common.in_process import Profiled, int4_fp16_table
from bench.common.machine import Cores
from simulator import Fleet, SimFleetConfig, SimPairConfig, run_fleet

BUDGET_MS = 400
MAX_TOKENS = 15
TTFT_S, TPOT_S, TPOT_PER_RUNNING_S = 0.03, 0.01, 0.002
MAX_RUNNING = 64
ENGINES = 2
MIX = (("critical", 0.2), ("standard", 0.5), ("batch", 0.3))
STEADY_SHARE, BURSTY_SHARE, BURST_TIMES = 0.3, 0.3, 3.0
SEED = 23
WAIT_METRIC = "gearbox_flow_queue_wait_seconds"


def engine_latency_s(running: int) -> float:
    """The simulated engine's time for one answer of MAX_TOKENS beside `running` - 1 others."""
    return TTFT_S + MAX_TOKENS * (TPOT_S + TPOT_PER_RUNNING_S * (running - 1))


def capacity_rps() -> float:
    """Requests per second both engines sustain with each answer in budget (Little's law at
    the most requests in flight per engine whose answers still meet BUDGET_MS)."""
    fit = max(n for n in range(1, MAX_RUNNING + 1) if engine_latency_s(n) <= BUDGET_MS / 1000)
    return ENGINES * fit / engine_latency_s(fit)


# At load L (this request included): TPOT_S + per-running x (L - 1).
PROFILED = Profiled(
    ttft_base_s=TTFT_S,
    tpot_base_s=TPOT_S - TPOT_PER_RUNNING_S,
    tpot_per_load_s=TPOT_PER_RUNNING_S,
    max_profiled_load=MAX_RUNNING,
)


def engines(quants: tuple[str, ...] = ("int4", "fp16")) -> SimFleetConfig:
    return SimFleetConfig(
        pairs=[
            SimPairConfig(
                name=f"sim-{q}", family="fam", quantization=q, ttft_base_s=TTFT_S,
                tpot_base_s=TPOT_S, tpot_per_running_s=TPOT_PER_RUNNING_S,
                max_running=MAX_RUNNING, context_length=8192,
            )
            for q in quants
        ]
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Arrival:
    at_s: float
    tenant: str
    priority: str
    in_burst: bool


@dataclass(frozen=True, slots=True)
class BurstRun:
    name: str
    samples: tuple[Sample, ...]
    router_cpu_s: float  # the data plane's CPU time over the run
    queued: float  # requests that waited (gearbox_flow_queued_total)
    wait_p99_le_s: float  # 99% of waits were at most this bucket bound (NaN: none waited)
    wait_mean_s: float  # the mean wait, exact (the histogram's sum over its count)
    busy: Busy  # each engine's running requests over the run (8 fit in budget)


def _poisson(rng: random.Random, rate: float, start: float, end: float) -> list[float]:
    times: list[float] = []
    t = start
    while True:
        t += rng.expovariate(rate)
        if t >= end:
            return times
        times.append(t)


def schedule(
    seconds: float, tenants: dict[str, float], burst_rps: float, seed: int = SEED
) -> list[Arrival]:
    """Poisson arrivals per tenant (name -> requests/s); the `bursty` tenant, when present and
    `burst_rps` > 0, sends `burst_rps` instead during the middle third. Seeded: every run with
    the same arguments gets the same schedule."""
    rng = random.Random(seed)
    lo, hi = seconds / 3, 2 * seconds / 3
    arrivals: list[tuple[float, str]] = []
    for tenant, rate in tenants.items():
        if tenant == "bursty" and burst_rps > 0:
            times = _poisson(rng, rate, 0, lo) + _poisson(rng, burst_rps, lo, hi)
            times += _poisson(rng, rate, hi, seconds)
        else:
            times = _poisson(rng, rate, 0, seconds)
        arrivals += [(t, tenant) for t in times]
    names, weights = [m[0] for m in MIX], [m[1] for m in MIX]
    return [
        Arrival(t, tenant, rng.choices(names, weights)[0], lo <= t < hi)
        for t, tenant in sorted(arrivals)
    ]


def burst_schedule(seconds: float) -> list[Arrival]:
    cap = capacity_rps()
    rates = {"steady": STEADY_SHARE * cap, "bursty": BURSTY_SHARE * cap}
    return schedule(seconds, rates, BURST_TIMES * cap)


async def _send(s: aiohttp.ClientSession, url: str, a: Arrival, scheduled: float) -> Sample:
    body = {"model": "auto", "messages": [{"role": "user", "content": "Hi"}]}
    body["max_tokens"] = MAX_TOKENS  # type: ignore[assignment]
    headers = {
        "X-Latency-Budget-Ms": str(BUDGET_MS),
        "x-gearbox-tenant": a.tenant,
        "X-Priority": a.priority,
    }
    status, _ = await post(s, url, body, headers)
    seconds = time.monotonic() - scheduled
    return Sample(a.tenant, a.priority, status, seconds, BUDGET_MS / 1000, a.in_burst)


async def replay(url: str, arrivals: list[Arrival]) -> tuple[Sample, ...]:
    """Each arrival sent at its time whatever the router does; seconds from that time."""
    async with session() as s:
        tasks: list[asyncio.Task[Sample]] = []
        start = time.monotonic() + 0.1
        for a in arrivals:
            delay = start + a.at_s - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(_send(s, url, a, start + a.at_s)))
        return tuple(await asyncio.gather(*tasks))


async def _one(name: str, r: Router, arrivals: list[Arrival], fleet: Fleet) -> BurstRun:
    stop = asyncio.Event()
    watch = asyncio.create_task(watch_running(fleet, ["sim-int4", "sim-fp16"], stop))
    cpu = r.cpu_s()
    samples = await replay(r.chat_url, arrivals)
    cpu = r.cpu_s() - cpu
    stop.set()
    text = await asyncio.to_thread(r.metrics)
    queued = sample_sum(text, "gearbox_flow_queued_total")
    buckets = wait_histogram(text, WAIT_METRIC)
    count = sample_sum(text, WAIT_METRIC + "_count")
    mean = sample_sum(text, WAIT_METRIC + "_sum") / count if count else math.nan
    p99 = bucket_quantile(buckets, 0.99)
    return BurstRun(name, samples, cpu, queued, p99, mean, await watch)


async def run_burst(workdir: Path, cores: Cores, seconds: float) -> tuple[BurstRun, BurstRun]:
    """The burst with flow control as shipped, then with the queue off."""
    arrivals = burst_schedule(seconds)
    runs = []
    async with run_fleet(engines(), answers={}) as fleet:
        table = int4_fp16_table(fleet, PROFILED)
        for name, env in (("flow control", TRUSTED), ("FLOW_QUEUE=false", TRUSTED | QUEUE_OFF)):
            with router(workdir / "burst", table, cores, env) as r:
                runs.append(await _one(name, r, arrivals, fleet))
    return runs[0], runs[1]
