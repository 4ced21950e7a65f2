"""Scenario 2 (issue 32, finding 2): a light tenant (`LIGHT_LOOPS` closed loops) beside a
bulk tenant (`BULK_LOOPS` closed loops that wait the Retry-After they are told after a 429)
on one simulated engine that holds `SLOTS` requests in budget, so the bulk tenant alone asks
for more than the fleet sustains. The light tenant's budget attainment beside the bulk
tenant is compared with its solo run, in three variants of the bulk tenant: one tenant name,
spread over `BULK_LOOPS` tenant names, and claiming `X-Priority: critical` without the right
(no trusted gateway, no key: the header may only lower a class); then the names again with API
keys, where a tenant is the key's by right and the names a key holder invents are not read
(docs/data_plane.md, "Tenants, priorities and admission"). Without keys a name is all a router
has to tell tenants apart, so twelve names are twelve tenants.

The engine is `burst`'s int4 engine, in a table that says exactly what it does; every request
asks for `burst.MAX_TOKENS` tokens with a `burst.BUDGET_MS` budget, default class.
"""

from __future__ import annotations

import asyncio
import json
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
VARIANTS = (
    "bulk as one tenant",
    "bulk over 12 tenant names",
    "bulk claiming critical",
    "bulk over 12 tenant names, API keys",
)
KEYED = VARIANTS[3]
# The keyed variant's keys file: each tenant's key (bench-only values, loopback only).
KEYS = {"light": "light-tenant-key-0001", "bulk": "bulk-tenant-key-0001"}


@dataclass(frozen=True, slots=True)
class TenantRun:
    name: str
    samples: tuple[Sample, ...]
    busy: Busy  # the engine's running requests over the run (SLOTS fit in budget)


def bulk_headers(variant: str, loop: int) -> dict[str, str]:
    """The bulk tenant's headers in `variant` for its loop number `loop` (PURE)."""
    if variant == KEYED:
        return {"x-gearbox-tenant": f"bulk-{loop:02d}", **bearer("bulk")}
    if variant == VARIANTS[1]:
        return {"x-gearbox-tenant": f"bulk-{loop:02d}"}
    if variant == VARIANTS[2]:
        return {"x-gearbox-tenant": "bulk", "X-Priority": "critical"}
    return {"x-gearbox-tenant": "bulk"}


def bearer(tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[tenant]}"}


def keys_file(workdir: Path) -> Path:
    """The keyed variant's API keys file: one key per tenant, the policy's default class."""
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "api-keys.json"
    path.write_text(json.dumps([{"key": k, "tenant": t} for t, k in KEYS.items()]))
    return path


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
        light = {"x-gearbox-tenant": "light", **(bearer("light") if variant == KEYED else {})}
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
            env = dict(FLOW_ON)
            if variant == KEYED:
                keys = keys_file(workdir / "tenants")
                env["GEARBOX_DP_SERVER_API_KEYS_FILE"] = str(keys)
            with router(workdir / "tenants", table, cores, env) as r:
                runs.append(await _run(fleet, r.chat_url, variant, seconds))
    return tuple(runs)
