"""Section 9: admission as flow control (issue 32), against the truth the simulator knows.

Four scenarios, each on fresh data planes (`bench.admission.stack`: the router as its own
process on the proxy core, the clients and simulated engines in this process):
1. `idle`: one sequential client on an idle fleet (the shipped 8B example profiles), over a
   grid of budgets and `max_tokens`, answers that stop early: nothing may be refused.
2. `tenants`: a light tenant (2 closed loops) beside a bulk tenant (12 closed loops that
   honour Retry-After) on one engine, the bulk tenant as one name, over 12 names, and
   claiming `critical` without the right: the light tenant's attainment against its solo run.
3. `steady`: a mixed trace at 1x and 2x on a six-pair fleet (two families, four precisions),
   no `X-Task-Category`, clients that do not retry: refusals, and attainment against
   admission and flow off.
4. `burst`: a tenant's burst at 3x the fleet's capacity over a steady tenant, priorities
   drawn per request: the critical class's attainment (over several seeds' burst windows,
   with its 95% interval and each miss's cause), refusals before their deadline, the queue's
   p99 wait and the router's CPU time per queued request (against the queue off).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from bench.admission.burst import MORE_SEEDS, BurstRun, run_burst
from bench.admission.idle import IdleResult, run_idle
from bench.admission.steady import SteadyRun, run_steady
from bench.admission.tenants import TenantRun, run_tenants
from bench.common.machine import Pinning


@dataclass(frozen=True, slots=True)
class Durations:
    """How long each scenario runs: requests of the idle client, seconds of the others."""

    idle_requests: int
    tenants_s: float
    steady_s: float
    burst_s: float
    more_seeds: tuple[int, ...] = ()  # the burst with flow control on these seeds too


FULL = Durations(
    idle_requests=1000, tenants_s=10.0, steady_s=20.0, burst_s=15.0, more_seeds=MORE_SEEDS
)
QUICK = Durations(idle_requests=120, tenants_s=3.0, steady_s=4.0, burst_s=6.0)


@dataclass(frozen=True, slots=True)
class AdmissionResult:
    durations: Durations
    idle: IdleResult
    tenants: tuple[TenantRun, ...]  # the light tenant alone first, then each bulk variant
    steady: tuple[SteadyRun, ...]  # per load: flow on, then admission and flow off
    burst: BurstRun  # flow control as shipped
    burst_queue_off: BurstRun  # the same schedule with FLOW_QUEUE=false
    burst_more: tuple[BurstRun, ...] = ()  # flow control on `Durations.more_seeds`

    @property
    def bursts(self) -> tuple[BurstRun, ...]:
        """Every burst run with flow control as shipped."""
        return (self.burst, *self.burst_more)


async def _measure(pinning: Pinning, workdir: Path, d: Durations) -> AdmissionResult:
    cores = pinning.proxy
    print("     idle sequential client", flush=True)
    idle = await run_idle(workdir, cores, d.idle_requests)
    print("     light tenant beside a bulk tenant", flush=True)
    tenants = await run_tenants(workdir, cores, d.tenants_s)
    print("     steady load at 1x and 2x", flush=True)
    steady = await run_steady(workdir, cores, d.steady_s)
    print("     3x burst", flush=True)
    burst, queue_off, more = await run_burst(workdir, cores, d.burst_s, d.more_seeds)
    return AdmissionResult(d, idle, tenants, steady, burst, queue_off, more)


def run_admission(pinning: Pinning, workdir: Path, quick: bool) -> AdmissionResult:
    return asyncio.run(_measure(pinning, workdir / "admission", QUICK if quick else FULL))
