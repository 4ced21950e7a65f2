"""Section 7: a hostile tenant beside normal clients (issue 22): what one client's long answers
do to the breakers and to everyone else, and that a truly hung engine is still caught.

In one process and event loop, no Redis: two simulated engines of one family (`int4`, cheap,
and `fp16`, four times the price), profiled as they run, and a data plane from `create_app`
serving the table from a snapshot file. Closed-loop normal clients send short requests
(`max_tokens` 10, a 500 ms budget; the engines answer in about 0.1 s). Three runs, each on a
fresh data plane:
- without the hostile client;
- with it: after every nine normal answers one non-streamed "essay" without `max_tokens`
  (10% of the requests; asked of the cheap pair by name; the engine writes 700 tokens, about
  4.3 s, inside the essay's 6 s budget). Reported: breaker openings of the (healthy)
  engines, the essays' statuses, and the normal clients' budget attainment against the run
  without it;
- the cheap engine hangs (no headers ever): seconds from the first request until its breaker
  opens, while the normal clients go on being served by the other pair.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from bench.common.in_process import Profiled, int4_fp16_table, static_data_plane
from data_plane.app import METRICS
from simulator import FaultConfig, Fleet, SimFleetConfig, SimPairConfig, run_fleet

CHEAP, PRICEY = "fam@int4", "fam@fp16"
ENDPOINTS = (f"{CHEAP}#0", f"{PRICEY}#0")
BUDGET_MS, ESSAY_BUDGET_MS = 500, 6000
CLIENTS = 4
ESSAY_EVERY = 9  # normal answers per essay: essays are 10% of the requests
ESSAY_TOKENS = 700  # what the engine writes without max_tokens
TTFT_S, TPOT_S = 0.03, 0.006


@dataclass(frozen=True, slots=True)
class Run:
    name: str
    normal: int  # normal answers
    attainment: float  # share of normal requests answered 200 within their budget
    essays: dict[int, int]  # essay status -> count (empty without the hostile client)
    breaker_openings: dict[str, int]  # endpoint -> transitions to open


@dataclass(frozen=True, slots=True)
class HostileResult:
    seconds: float  # per run
    without: Run
    with_hostile: Run
    hung_detect_s: float  # first request -> the hung engine's breaker open (nan: never)
    hung_served: float  # share of normal requests answered (200) meanwhile
    notes: tuple[str, ...] = field(default=())


# As profiled: 30 ms to the first token, 6 ms per token.
PROFILED = Profiled(ttft_base_s=TTFT_S, tpot_base_s=TPOT_S)


@asynccontextmanager
async def data_plane(fleet: Fleet, folder: Path) -> AsyncIterator[tuple[str, web.Application]]:
    """A fresh data plane (static mode: the table from a snapshot file)."""
    table = int4_fp16_table(fleet, PROFILED)
    async with static_data_plane(table, folder, "bench-hostile") as served:
        yield served


def _body(content: str, **fields: Any) -> dict[str, Any]:
    return {"model": "auto", "messages": [{"role": "user", "content": content}]} | fields


class Traffic:
    """Closed-loop normal clients and, when `hostile`, one essay after every ESSAY_EVERY
    normal answers (sent without waiting for it)."""

    def __init__(self, url: str, session: aiohttp.ClientSession, hostile: bool) -> None:
        self.url, self.session, self.hostile = url, session, hostile
        self.normal: list[bool] = []  # met the budget
        self.answered: list[bool] = []  # got a 200, in budget or not
        self.essays: Counter[int] = Counter()
        self._pending: set[asyncio.Task[None]] = set()

    async def _post(self, body: dict[str, Any], budget_ms: int) -> tuple[int, float]:
        started = time.monotonic()
        headers = {"X-Latency-Budget-Ms": str(budget_ms)}
        async with self.session.post(self.url, json=body, headers=headers) as resp:
            await resp.read()
            return resp.status, time.monotonic() - started

    async def _essay(self) -> None:
        # By pair name: the simulator's filler essay would otherwise be re-asked by the
        # quality guard on the dearer pair (its re-ask budget assumes the typical length).
        essay = _body("Write an essay about bicycles.", model=CHEAP)
        status, _ = await self._post(essay, ESSAY_BUDGET_MS)
        self.essays[status] += 1

    async def client(self) -> None:
        while True:
            status, took_s = await self._post(_body("Hi", max_tokens=10), BUDGET_MS)
            self.normal.append(status == 200 and took_s <= BUDGET_MS / 1000)
            self.answered.append(status == 200)
            if self.hostile and len(self.normal) % ESSAY_EVERY == 0:
                task = asyncio.create_task(self._essay())
                self._pending.add(task)
                task.add_done_callback(self._pending.discard)

    async def drain(self) -> None:
        await asyncio.gather(*self._pending, return_exceptions=True)


def _openings(app: web.Application) -> dict[str, int]:
    registry = app[METRICS].registry
    return {
        e: int(registry.get_sample_value(
            "gearbox_circuit_transitions_total", {"endpoint": e, "to": "open"}) or 0)
        for e in ENDPOINTS
    }  # fmt: skip


async def _run(name: str, fleet: Fleet, folder: Path, seconds: float, hostile: bool) -> Run:
    async with data_plane(fleet, folder) as (url, app), aiohttp.ClientSession() as session:
        traffic = Traffic(url, session, hostile)
        tasks = [asyncio.create_task(traffic.client()) for _ in range(CLIENTS)]
        await asyncio.sleep(seconds)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await traffic.drain()
        n = len(traffic.normal)
        attainment = sum(traffic.normal) / n if n else 0.0
        return Run(name, n, attainment, dict(traffic.essays), _openings(app))


async def _hung(fleet: Fleet, folder: Path, timeout_s: float) -> tuple[float, float]:
    """Seconds until the hung cheap engine's breaker opens, and the share of the normal
    clients' requests answered (200, by the other pair) meanwhile."""
    fleet.set_faults("sim-int4", FaultConfig(hang_rate=1.0))
    try:
        async with data_plane(fleet, folder) as (url, app), aiohttp.ClientSession() as session:
            traffic = Traffic(url, session, hostile=False)
            started = time.monotonic()
            tasks = [asyncio.create_task(traffic.client()) for _ in range(CLIENTS)]
            detected = float("nan")
            while time.monotonic() - started < timeout_s:
                if _openings(app)[ENDPOINTS[0]] > 0:
                    detected = time.monotonic() - started
                    break
                await asyncio.sleep(0.05)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        fleet.set_faults("sim-int4", FaultConfig())
    answered = traffic.answered
    return detected, (sum(answered) / len(answered) if answered else 0.0)


async def _measure(seconds: float) -> HostileResult:
    pairs = [
        SimPairConfig(name=f"sim-{q}", family="fam", quantization=q, ttft_base_s=TTFT_S,
                      tpot_base_s=TPOT_S, max_running=64, default_max_tokens=ESSAY_TOKENS,
                      context_length=8192)
        for q in ("int4", "fp16")
    ]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="gearbox-hostile-") as tmp:
        folder = Path(tmp)
        async with run_fleet(SimFleetConfig(pairs=pairs), answers={}) as fleet:
            without = await _run("without the hostile client", fleet, folder, seconds, False)
            with_hostile = await _run("with the hostile client", fleet, folder, seconds, True)
            detect_s, served = await _hung(fleet, folder, timeout_s=30.0)
    return HostileResult(
        seconds,
        without,
        with_hostile,
        detect_s,
        served,
        notes=(
            f"{CLIENTS} closed-loop clients, max_tokens 10, budget {BUDGET_MS} ms; essays: no "
            f"max_tokens ({ESSAY_TOKENS} tokens written), budget {ESSAY_BUDGET_MS} ms, one "
            f"per {ESSAY_EVERY} normal answers; engines profiled at TTFT {TTFT_S * 1000:g} ms, "
            f"TPOT {TPOT_S * 1000:g} ms; breaker opens after 5 consecutive failures.",
        ),
    )


def run_hostile(quick: bool) -> HostileResult:
    return asyncio.run(_measure(5.0 if quick else 30.0))
