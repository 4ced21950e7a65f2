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
the queue adds; then with flow control on more seeds' schedules, so that the critical
requests in the burst windows are enough to tell 99% from 98% (one seed's window holds about
130). Each request is followed to the engine (`simulator.engine.Engine.watch`, by its
X-Request-Id) for why a critical one missed (`bench.admission.misses`), and the time the
router and this process waited for a CPU is read from /proc (schedstat: the loaded machine):
over the run, and per request from its send to the engine's arrival (the router's event-loop
thread's CPU and runnable time then), beside its wait in the router's queue
(`X-Route-Queued-Ms`).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from bench.admission.misses import Path as RequestPath
from bench.admission.stack import (
    QUEUE_OFF,
    TRUSTED,
    Busy,
    Router,
    Sample,
    bucket_quantile,
    router,
    sample_sum,
    session,
    wait_histogram,
    watch_running,
)
from bench.common.in_process import Profiled, int4_fp16_table
from bench.common.machine import Cores
from simulator import Fleet, SimFleetConfig, SimPairConfig, run_fleet
from simulator.engine import ReceivedRequest

BUDGET_MS = 400
MAX_TOKENS = 15
TTFT_S, TPOT_S, TPOT_PER_RUNNING_S = 0.03, 0.01, 0.002
MAX_RUNNING = 64
ENGINES = 2
MIX = (("critical", 0.2), ("standard", 0.5), ("batch", 0.3))
STEADY_SHARE, BURSTY_SHARE, BURST_TIMES = 0.3, 0.3, 3.0
SEED = 23
MORE_SEEDS = (24, 25, 26, 27)  # flow control again on these schedules (critical: ~130 each)
WAIT_METRIC = "gearbox_flow_queue_wait_seconds"
PAST_BUDGET_METRIC = "gearbox_flow_sent_past_budget_total"


def engine_latency_s(running: int) -> float:
    """The simulated engine's time for one answer of MAX_TOKENS beside `running` - 1 others."""
    return TTFT_S + MAX_TOKENS * (TPOT_S + TPOT_PER_RUNNING_S * (running - 1))


def fit() -> int:
    """The most requests running at once on an engine whose answers still meet BUDGET_MS."""
    return max(n for n in range(1, MAX_RUNNING + 1) if engine_latency_s(n) <= BUDGET_MS / 1000)


def capacity_rps() -> float:
    """Requests per second both engines sustain with each answer in budget (Little's law at
    `fit` requests in flight per engine)."""
    return ENGINES * fit() / engine_latency_s(fit())


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
    paths: tuple[RequestPath, ...] = ()  # per sample (same order): its way to the engine
    seed: int = SEED
    router_runnable_s: float = math.nan  # the router's time runnable but not running
    client_runnable_s: float = math.nan  # ...this process's event loop's (clients, engines)
    critical_queued: float = math.nan  # critical requests that waited in the router's queue
    # ...and of those, sent at their deadline or a bound where their pair's prediction at
    # the load they joined was past what was left of their budget (NaN: a router without
    # gearbox_flow_sent_past_budget_total)
    critical_past_budget: float = math.nan


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


def burst_schedule(seconds: float, seed: int = SEED) -> list[Arrival]:
    cap = capacity_rps()
    rates = {"steady": STEADY_SHARE * cap, "bursty": BURSTY_SHARE * cap}
    return schedule(seconds, rates, BURST_TIMES * cap, seed)


class SchedStat:
    """A thread's time on a CPU and runnable but not running, in seconds, read from
    /proc/PID/task/TID/schedstat (a process's main thread: TID = PID) through one open file
    (a few microseconds a read); (NaN, NaN) where it cannot be read."""

    def __init__(self, pid: int, tid: int | None = None) -> None:
        try:
            self._fd: int | None = os.open(f"/proc/{pid}/task/{tid or pid}/schedstat", os.O_RDONLY)
        except OSError:
            self._fd = None

    def read(self) -> tuple[float, float]:
        if self._fd is None:
            return math.nan, math.nan
        try:
            run, wait = os.pread(self._fd, 128, 0).split()[:2]
            return int(run) / 1e9, int(wait) / 1e9
        except (OSError, ValueError):
            return math.nan, math.nan

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


NOT_READ = (math.nan, math.nan)
# X-Request-Id -> (engine's clock at arrival, held, the router's SchedStat then)
Seen = dict[str, tuple[float, int, tuple[float, float]]]


async def _send(
    s: aiohttp.ClientSession,
    url: str,
    a: Arrival,
    scheduled: float,
    stat: SchedStat | None = None,
) -> Traced:
    body = {"model": "auto", "messages": [{"role": "user", "content": "Hi"}]}
    body["max_tokens"] = MAX_TOKENS  # type: ignore[assignment]
    headers = {
        "X-Latency-Budget-Ms": str(BUDGET_MS),
        "x-gearbox-tenant": a.tenant,
        "X-Priority": a.priority,
        "Content-Type": "application/json",
    }
    status, request_id, late = 0, None, time.monotonic() - scheduled
    predicted, reason, queued = None, "", None
    router_at_send = NOT_READ if stat is None else stat.read()
    try:
        async with s.post(url, data=json.dumps(body), headers=headers) as resp:
            await resp.read()
            status, request_id = resp.status, resp.headers.get("X-Request-Id")
            predicted = resp.headers.get("X-Route-Predicted-Latency-Ms")
            reason = resp.headers.get("X-Route-Reason", "")
            queued = resp.headers.get("X-Route-Queued-Ms")
    except (aiohttp.ClientError, TimeoutError):
        pass
    seconds = time.monotonic() - scheduled
    sample = Sample(a.tenant, a.priority, status, seconds, BUDGET_MS / 1000, a.in_burst)
    predicted_s = None if predicted is None else int(predicted) / 1000
    queued_s = 0.0 if queued is None else int(queued) / 1000
    return Traced(
        sample, scheduled, request_id, late, predicted_s, reason, a.at_s, queued_s,
        router_at_send,
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Traced:
    """One request as its client saw it, with what the router said of it."""

    sample: Sample
    scheduled: float  # monotonic
    request_id: str | None
    sent_late_s: float  # sent that long after `scheduled`
    predicted_s: float | None = None  # X-Route-Predicted-Latency-Ms: at the router's load
    reason: str = ""  # X-Route-Reason
    at_s: float = 0.0  # its time in the schedule
    queued_s: float = 0.0  # X-Route-Queued-Ms: its wait in the router's queue
    router_at_send: tuple[float, float] = NOT_READ  # the router's SchedStat when sent

    def path(self, seen: Seen) -> RequestPath:
        s = self.sample
        arrived = None if self.request_id is None else seen.get(self.request_id)
        to_engine = None if arrived is None else arrived[0] - self.scheduled
        held = 0 if arrived is None else arrived[1]
        at_engine = NOT_READ if arrived is None else arrived[2]
        cpu, runnable = (b - a for a, b in zip(self.router_at_send, at_engine, strict=True))
        return RequestPath(
            s.status, s.seconds, s.budget_s, to_engine, held, self.sent_late_s,
            self.predicted_s, self.reason, self.at_s, self.queued_s, cpu, runnable,
        )  # fmt: skip


async def replay(
    url: str, arrivals: list[Arrival], stat: SchedStat | None = None
) -> tuple[Traced, ...]:
    """Each arrival sent at its time whatever the router does; seconds from that time
    (`stat`: the router's, read as each is sent)."""
    async with session() as s:
        tasks: list[asyncio.Task[Traced]] = []
        start = time.monotonic() + 0.1
        for a in arrivals:
            delay = start + a.at_s - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(_send(s, url, a, start + a.at_s, stat)))
        return tuple(await asyncio.gather(*tasks))


def runnable_s(pid: int | str = "self") -> float:
    """Seconds `pid`'s main thread has spent runnable but not running (waiting for a CPU),
    from /proc/PID/schedstat; NaN where it cannot be read."""
    try:
        with open(f"/proc/{pid}/schedstat", encoding="ascii") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return math.nan


async def _one(
    name: str, r: Router, arrivals: list[Arrival], fleet: Fleet, seed: int = SEED
) -> BurstRun:
    stop = asyncio.Event()
    names = ["sim-int4", "sim-fp16"]
    seen: Seen = {}
    stat = SchedStat(r.pid)

    def arrived(req: ReceivedRequest, at: float, held: int) -> None:
        seen[req.headers.get("x-request-id", "")] = (at, held, stat.read())

    for engine in names:
        fleet.engine(engine).watch(arrived)
    watch = asyncio.create_task(watch_running(fleet, names, stop))
    cpu, waits = r.cpu_s(), (runnable_s(r.pid), runnable_s())
    traced = await replay(r.chat_url, arrivals, stat)
    stat.close()
    cpu = r.cpu_s() - cpu
    router_wait, client_wait = runnable_s(r.pid) - waits[0], runnable_s() - waits[1]
    stop.set()
    for engine in names:
        fleet.engine(engine).watch(None)
    text = await asyncio.to_thread(r.metrics)
    queued = sample_sum(text, "gearbox_flow_queued_total")
    critical_queued = sample_sum(text, "gearbox_flow_queued_total", priority="critical")
    past = PAST_BUDGET_METRIC in text
    past_budget = sample_sum(text, PAST_BUDGET_METRIC, priority="critical") if past else math.nan
    buckets = wait_histogram(text, WAIT_METRIC)
    count = sample_sum(text, WAIT_METRIC + "_count")
    mean = sample_sum(text, WAIT_METRIC + "_sum") / count if count else math.nan
    p99 = bucket_quantile(buckets, 0.99)
    samples = tuple(t.sample for t in traced)
    paths = tuple(t.path(seen) for t in traced)
    busy = await watch
    return BurstRun(
        name, samples, cpu, queued, p99, mean, busy, paths, seed, router_wait, client_wait,
        critical_queued, past_budget,
    )  # fmt: skip


async def run_bursts(
    workdir: Path,
    cores: Cores,
    seconds: float,
    plans: list[tuple[str, dict[str, str], int]],
    env: Mapping[str, str] | None = None,
) -> list[BurstRun]:
    """One run per plan (name, settings, seed), each on a fresh router (`env`: more
    environment for every router, e.g. PYTHONPATH to run another tree's data plane)."""
    runs = []
    async with run_fleet(engines(), answers={}) as fleet:
        table = int4_fp16_table(fleet, PROFILED)
        for name, settings, seed in plans:
            arrivals = burst_schedule(seconds, seed)
            with router(workdir / "burst", table, cores, {**settings, **(env or {})}) as r:
                runs.append(await _one(name, r, arrivals, fleet, seed))
    return runs


async def run_burst(
    workdir: Path, cores: Cores, seconds: float, more_seeds: tuple[int, ...] = MORE_SEEDS
) -> tuple[BurstRun, BurstRun, tuple[BurstRun, ...]]:
    """The burst with flow control as shipped, then with the queue off, on SEED's schedule;
    then flow control on each of `more_seeds`'."""
    plans = [("flow control", TRUSTED, SEED), ("FLOW_QUEUE=false", TRUSTED | QUEUE_OFF, SEED)]
    plans += [("flow control", TRUSTED, seed) for seed in more_seeds]
    runs = await run_bursts(workdir, cores, seconds, plans)
    return runs[0], runs[1], tuple(runs[2:])
