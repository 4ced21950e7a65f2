"""Scenario 2 (issue 32, finding 2): a light tenant (`LIGHT_LOOPS` closed loops) beside a
bulk tenant (`BULK_LOOPS` closed loops that wait the Retry-After they are told after a 429)
on one simulated engine that holds `SLOTS` requests in budget, so the bulk tenant alone asks
for more than the fleet sustains. The light tenant's budget attainment beside the bulk
tenant is compared with its solo run, in three variants of the bulk tenant: one tenant name,
spread over `BULK_LOOPS` tenant names, and claiming `X-Priority: critical` without the right
(no trusted gateway, no key: the header may only lower a class).

The engine is `burst`'s int4 engine, in a table that says exactly what it does; every request
asks for `burst.MAX_TOKENS` tokens with a `burst.BUDGET_MS` budget, default class.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from bench.admission import burst as b
from bench.admission.stack import FLOW_ON, Busy, Sample, post, router, session, watch_running
from bench.common.in_process import family_entry, family_table
from bench.common.machine import Cores
from simulator import Fleet, run_fleet

LIGHT_LOOPS, BULK_LOOPS = 2, 12
SLOTS = max(n for n in range(1, 65) if b.engine_latency_s(n) <= b.BUDGET_MS / 1000)
SOLO = "light tenant alone"
VARIANTS = ("bulk as one tenant", "bulk over 12 tenant names", "bulk claiming critical")


@dataclass(frozen=True, slots=True)
class TenantRun:
    name: str
    samples: tuple[Sample, ...]
    busy: Busy  # the engine's running requests over the run (SLOTS fit in budget)


def bulk_headers(variant: str, loop: int) -> dict[str, str]:
    """The bulk tenant's headers in `variant` for its loop number `loop` (PURE)."""
    if variant == VARIANTS[1]:
        return {"x-gearbox-tenant": f"bulk-{loop:02d}"}
    if variant == VARIANTS[2]:
        return {"x-gearbox-tenant": "bulk", "X-Priority": "critical"}
    return {"x-gearbox-tenant": "bulk"}


async def _loop(
    s: aiohttp.ClientSession, url: str, headers: dict[str, str], until: float, out: list[Sample]
) -> None:
    """One client, one request at a time; after a 429 it waits its Retry-After."""
    body = {"model": "auto", "messages": [{"role": "user", "content": "Hi"}]}
    body["max_tokens"] = b.MAX_TOKENS  # type: ignore[assignment]
    headers = {**headers, "X-Latency-Budget-Ms": str(b.BUDGET_MS)}
    tenant = "light" if headers["x-gearbox-tenant"] == "light" else "bulk"
    while (now := time.monotonic()) < until:
        status, retry_after = await post(s, url, body, headers)
        seconds = time.monotonic() - now
        out.append(Sample(tenant, "standard", status, seconds, b.BUDGET_MS / 1000))
        if status != 200:
            pause = float(retry_after) if retry_after else 1.0
            await asyncio.sleep(max(0.0, min(pause, until - time.monotonic())))


async def _run(fleet: Fleet, url: str, variant: str | None, seconds: float) -> TenantRun:
    out: list[Sample] = []
    stop = asyncio.Event()
    watch = asyncio.create_task(watch_running(fleet, ["sim-int4"], stop))
    until = time.monotonic() + seconds
    async with session() as s:
        light = {"x-gearbox-tenant": "light"}
        loops = [_loop(s, url, light, until, out) for _ in range(LIGHT_LOOPS)]
        if variant is not None:
            loops += [
                _loop(s, url, bulk_headers(variant, i), until, out) for i in range(BULK_LOOPS)
            ]
        await asyncio.gather(*loops)
    stop.set()
    return TenantRun(variant or SOLO, tuple(out), await watch)


async def run_tenants(workdir: Path, cores: Cores, seconds: float) -> tuple[TenantRun, ...]:
    """The solo run, then each variant, each on a fresh data plane (no state carried over)."""
    runs = []
    async with run_fleet(b.engines(("int4",)), answers={}) as fleet:
        table = family_table([family_entry("int4", fleet.url("sim-int4"), 1.0, b.PROFILED)])
        for variant in (None, *VARIANTS):
            with router(workdir / "tenants", table, cores, FLOW_ON) as r:
                runs.append(await _run(fleet, r.chat_url, variant, seconds))
    return tuple(runs)
