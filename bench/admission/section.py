"""Section 9: admission under a tenant's burst (issue 23): two tenants on the simulated fleet,
with and without shedding, per tenant and priority class.

In one process and event loop, no Redis: two simulated engines of one family (`int4`, cheap,
and `fp16`, four times the price) whose time per token grows with the requests decoding beside
it, profiled as they run, and a fresh data plane from `create_app` per run serving the table
from a snapshot file. Every request asks for `MAX_TOKENS` tokens with a `BUDGET_MS` budget; a
seeded draw gives it a priority class (`MIX`: critical, standard, batch). The fleet's capacity
is what both engines sustain with every request in its budget (`capacity_rps`). Open-loop
(Poisson) arrivals, one schedule per run from a fixed seed:
- the steady tenant alone at `STEADY_SHARE` of capacity (its solo run);
- both tenants at their nominal rates (`STEADY_SHARE` + `BURSTY_SHARE` of capacity: the "1x");
- the bursty tenant sending `BURST_TIMES` the fleet's capacity for the middle third of the run,
  once with admission and once with `ADMISSION_SHED=false` (today's forwarding of everything).
Every request's status and seconds are taken at the client (a 429 included: the time to it).
"""

from __future__ import annotations

import asyncio
import random
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from bench.common.in_process import Profiled, int4_fp16_table, static_data_plane
from data_plane.settings import AdmissionSettings
from simulator import Fleet, SimFleetConfig, SimPairConfig, run_fleet

BUDGET_MS = 400
MAX_TOKENS = 15
TTFT_S, TPOT_S, TPOT_PER_RUNNING_S = 0.03, 0.01, 0.002
MAX_RUNNING = 64
ENGINES = 2
MIX = (("critical", 0.2), ("standard", 0.5), ("batch", 0.3))
STEADY_SHARE, BURSTY_SHARE, BURST_TIMES = 0.3, 0.3, 3.0
SEED = 23


@dataclass(frozen=True, slots=True)
class Sample:
    """One request as its client saw it."""

    tenant: str
    priority: str
    in_burst: bool  # sent during the bursty tenant's burst window
    status: int  # 0: no answer (connection error or client timeout)
    seconds: float  # to the whole answer (to the 429 when shed)


@dataclass(frozen=True, slots=True)
class Run:
    name: str
    samples: tuple[Sample, ...]


@dataclass(frozen=True, slots=True)
class AdmissionResult:
    seconds: float  # per run
    capacity_rps: float
    budget_s: float
    solo: Run  # the steady tenant alone
    nominal: Run  # both tenants at their nominal rates (1x)
    burst: Run  # the bursty tenant at BURST_TIMES capacity mid-run, admission on
    burst_no_admission: Run  # the same schedule with ADMISSION_SHED=false
    notes: tuple[str, ...] = field(default=())


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


@dataclass(frozen=True, slots=True)
class Arrival:
    at_s: float
    tenant: str
    priority: str
    in_burst: bool


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


async def _send(session: aiohttp.ClientSession, url: str, arrival: Arrival) -> Sample:
    body = {
        "model": "auto",
        "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": MAX_TOKENS,
    }
    headers = {
        "X-Latency-Budget-Ms": str(BUDGET_MS),
        "x-gearbox-tenant": arrival.tenant,
        "X-Priority": arrival.priority,
    }
    started = time.monotonic()
    try:
        async with session.post(url, json=body, headers=headers) as resp:
            await resp.read()
            status = resp.status
    except (aiohttp.ClientError, TimeoutError):
        status = 0
    return Sample(
        arrival.tenant, arrival.priority, arrival.in_burst, status, time.monotonic() - started
    )


async def _replay(url: str, arrivals: list[Arrival]) -> tuple[Sample, ...]:
    connector = aiohttp.TCPConnector(limit=0)  # no client-side queue in front of the router
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        tasks: list[asyncio.Task[Sample]] = []
        start = time.monotonic()
        for arrival in arrivals:
            delay = start + arrival.at_s - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(_send(session, url, arrival)))
        return tuple(await asyncio.gather(*tasks))


async def _run(name: str, fleet: Fleet, folder: Path, arrivals: list[Arrival], shed: bool) -> Run:
    table = int4_fp16_table(fleet, PROFILED)
    # The replay's client stands for a trusted gateway: its X-Priority classes count.
    admission = AdmissionSettings(shed=shed, priority_header_trusted=True)
    async with static_data_plane(table, folder, "bench-admission", admission) as (url, _):
        return Run(name, await _replay(url, arrivals))


async def _measure(seconds: float) -> AdmissionResult:
    pairs = [
        SimPairConfig(name=f"sim-{q}", family="fam", quantization=q, ttft_base_s=TTFT_S,
                      tpot_base_s=TPOT_S, tpot_per_running_s=TPOT_PER_RUNNING_S,
                      max_running=MAX_RUNNING, context_length=8192)
        for q in ("int4", "fp16")
    ]  # fmt: skip
    cap = capacity_rps()
    steady, bursty = STEADY_SHARE * cap, BURSTY_SHARE * cap
    solo = schedule(seconds, {"steady": steady}, 0.0)
    nominal = schedule(seconds, {"steady": steady, "bursty": bursty}, 0.0)
    burst = schedule(seconds, {"steady": steady, "bursty": bursty}, BURST_TIMES * cap)
    with tempfile.TemporaryDirectory(prefix="gearbox-admission-") as tmp:
        folder = Path(tmp)
        async with run_fleet(SimFleetConfig(pairs=pairs), answers={}) as fleet:
            runs = (
                await _run("steady tenant alone", fleet, folder, solo, True),
                await _run("both tenants at nominal rates (1x)", fleet, folder, nominal, True),
                await _run("burst, admission on", fleet, folder, burst, True),
                await _run("burst, ADMISSION_SHED=false", fleet, folder, burst, False),
            )
    notes = (
        f"Fleet: {ENGINES} simulated engines (int4, fp16 at 4x the price), TTFT {TTFT_S * 1000:g}"
        f" ms, TPOT {TPOT_S * 1000:g} ms + {TPOT_PER_RUNNING_S * 1000:g} ms per other request "
        f"decoding; every request max_tokens {MAX_TOKENS}, budget {BUDGET_MS} ms; capacity "
        f"{cap:.1f} req/s (both engines at the most requests in flight that meet the budget).",
        f"Steady tenant {steady:.1f} req/s; bursty tenant {bursty:.1f} req/s, "
        f"{BURST_TIMES * cap:.1f} req/s ({BURST_TIMES:g}x capacity) in the middle third of a "
        f"{seconds:g} s run; priorities drawn {', '.join(f'{n} {w:.0%}' for n, w in MIX)}; "
        "open-loop Poisson arrivals, one seeded schedule (the same for both burst runs).",
    )
    return AdmissionResult(seconds, cap, BUDGET_MS / 1000, *runs, notes=notes)


def run_admission(quick: bool) -> AdmissionResult:
    return asyncio.run(_measure(9.0 if quick else 45.0))
