"""Part of `python -m bench replicas`: is load between scrapes herded?

The cheapest pair saturates at the offered rate: its simulated engine runs at most
`CHEAP_CONCURRENCY` requests at once (more wait in line), its latency rises with every running
request, and the table's profile stops at that concurrency, so the budget only fits it while it
is not full. One router keeps it at its profiled concurrency and spills the rest to the next
pair; N replicas that each see only their own in-flight requests between scrapes send it up to
N times that, and the queued requests miss the budget.

At the same total rate through nginx, for 1, 2 and 4 replicas, three ways of seeing the others'
load (docs/data_plane.md, "In-flight sharing"): the scrape at its default interval alone, a
faster scrape, and in-flight sharing over Redis at a short interval. Reported: budget
attainment, the cheap engine's overshoot (its own peak of running + waiting, and the share of
samples above its profiled concurrency) and per-pair shares.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from aiohttp import ClientError, ClientSession, ClientTimeout

from bench.common.machine import Cores, Pinning, pinned
from bench.common.processes import running
from bench.common.tables import synthetic_table
from bench.replicas.section import (
    REPLICA_COUNTS,
    ReplicaPlan,
    Tally,
    offer_load,
    replica_fleet,
    wait_ready,
)
from bench.soak.section import KEY_PREFIX, N_PAIRS, sim_fleet, soak_table
from contracts.redis_keys import RedisKeys
from contracts.routing_table import RoutingTable, stamp_table
from control_plane.settings import PublisherOptions
from control_plane.store.publisher import Publisher
from demo.redis_launcher import private_redis

CHEAP_CONCURRENCY = 4
# The cheap engine: 0.05 s prefill, 20 ms a token plus 10 ms per other running request; 16
# tokens take 0.37 s alone and 0.85 s at 4 running (about 5 requests a second); one request
# waiting behind 4 running misses the 1 s budget.
CHEAP_SIM = {"ttft_base_s": 0.05, "tpot_base_s": 0.02, "tpot_per_running_s": 0.01}
CHEAP_PROFILE = {
    "ttft_base_s": 0.05,
    "ttft_per_input_token_s": 0.0,
    "ttft_per_load_s": 0.0,
    "tpot_base_s": 0.02,
    "tpot_per_load_s": 0.01,
    "max_profiled_load": CHEAP_CONCURRENCY,
}
MODES: dict[str, dict[str, str]] = {
    "scrape 1 s": {
        "GEARBOX_DP_SCRAPE_INTERVAL_S": "1",
        "GEARBOX_DP_IN_FLIGHT_SHARE_INTERVAL_MS": "0",
    },
    "scrape 0.1 s": {
        "GEARBOX_DP_SCRAPE_INTERVAL_S": "0.1",
        "GEARBOX_DP_IN_FLIGHT_SHARE_INTERVAL_MS": "0",
    },
    "scrape 1 s + sharing 100 ms": {
        "GEARBOX_DP_SCRAPE_INTERVAL_S": "1",
        "GEARBOX_DP_IN_FLIGHT_SHARE_INTERVAL_MS": "100",
    },
    "scrape 1 s + sharing 25 ms": {
        "GEARBOX_DP_SCRAPE_INTERVAL_S": "1",
        "GEARBOX_DP_IN_FLIGHT_SHARE_INTERVAL_MS": "25",
    },
}
SAMPLE_S = 0.02


@dataclass
class HerdResult:
    mode: str
    replicas: int
    rate_rps: float
    requests: int
    budget_met_ratio: float
    cheap_peak_in_flight: int
    cheap_over_ratio: float  # samples with running + waiting above CHEAP_CONCURRENCY
    pair_shares: dict[str, float]


def herd_table(urls: dict[str, str]) -> RoutingTable:
    """The soak table with the cheapest pair's profile replaced by the saturating one."""
    data = soak_table(urls, 0).model_dump(mode="json")
    data["entries"][0]["latency"] |= CHEAP_PROFILE
    return stamp_table(data)


def herd_fleet() -> dict[str, Any]:
    fleet = sim_fleet(synthetic_table(N_PAIRS, [["http://127.0.0.1:1"]]))
    fleet["pairs"][0] |= {**CHEAP_SIM, "max_running": CHEAP_CONCURRENCY}
    return fleet


@contextlib.contextmanager
def herd_simulator(workdir: Path, cpus: Cores) -> Iterator[dict[str, str]]:
    fleet, ports = workdir / "herd-fleet.json", workdir / "herd-ports.json"
    fleet.write_text(json.dumps(herd_fleet()))
    args = [sys.executable, "-m", "simulator", "serve", "--fleet", str(fleet)]
    with running(pinned([*args, "--ports-file", str(ports)], cpus), workdir / "sim.log") as proc:
        deadline = time.monotonic() + 60
        while not ports.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("herding simulator did not start")
            time.sleep(0.1)
        yield dict(json.loads(ports.read_text()))


async def _sample(stats_url: str, until: float) -> list[int]:
    """The cheap engine's running + waiting every SAMPLE_S until `until`."""
    seen: list[int] = []
    async with ClientSession(timeout=ClientTimeout(total=2)) as session:
        while time.monotonic() < until:
            with contextlib.suppress(ClientError, TimeoutError):
                async with session.get(stats_url) as resp:
                    doc = await resp.json()
                seen.append(int(doc["running"]) + int(doc["waiting"]))
            await asyncio.sleep(SAMPLE_S)
    return seen


async def _sim_call(url: str, method: str) -> dict[str, Any]:
    async with (
        ClientSession(timeout=ClientTimeout(total=5)) as session,
        session.request(method, url) as resp,
    ):
        resp.raise_for_status()
        doc: dict[str, Any] = await resp.json()
        return doc


async def _drive(
    lb: str,
    bases: list[str],
    cheap_url: str,
    table: RoutingTable,
    redis_url: str,
    plan: ReplicaPlan,
) -> tuple[Tally, list[int], int]:
    client = aioredis.Redis.from_url(redis_url)
    try:
        await Publisher(client, RedisKeys(KEY_PREFIX), PublisherOptions()).publish(table)
    finally:
        await client.aclose()
    await asyncio.gather(*(wait_ready(b) for b in bases))
    await asyncio.sleep(1.5)  # every replica has scraped and heard the others at least once
    await _sim_call(cheap_url + "/sim/reset", "POST")
    tally = Tally()
    t0 = time.monotonic()
    _, seen = await asyncio.gather(
        offer_load(lb + "/v1/chat/completions", plan, tally, t0),
        _sample(cheap_url + "/sim/stats", t0 + plan.duration_s),
    )
    stats = await _sim_call(cheap_url + "/sim/stats", "GET")
    return tally, seen, int(stats["peak_in_flight"])


def _one(pinning: Pinning, folder: Path, mode: str, n: int, plan: ReplicaPlan) -> HerdResult:
    folder.mkdir(parents=True, exist_ok=True)
    with (
        private_redis() as redis_url,
        herd_simulator(folder, pinning.aux) as urls,
        replica_fleet(folder, n, redis_url, pinning, MODES[mode]) as (lb, bases),
    ):
        table = herd_table(urls)
        cheap_url = urls[table.entries[0].served_model_name]
        tally, seen, peak = asyncio.run(_drive(lb, bases, cheap_url, table, redis_url, plan))
    total = sum(tally.statuses.values())
    served = sum(tally.pairs.values()) or 1
    return HerdResult(
        mode=mode,
        replicas=n,
        rate_rps=plan.rate_rps,
        requests=total,
        budget_met_ratio=tally.met / max(1, total),
        cheap_peak_in_flight=peak,
        cheap_over_ratio=sum(s > CHEAP_CONCURRENCY for s in seen) / max(1, len(seen)),
        pair_shares={p: c / served for p, c in sorted(tally.pairs.items())},
    )


def run_herding(pinning: Pinning, workdir: Path, quick: bool) -> list[HerdResult]:
    plan = ReplicaPlan(duration_s=5.0 if quick else 15.0)
    return [
        _one(pinning, workdir / f"herd-{i}-x{n}", mode, n, plan)
        for i, mode in enumerate(MODES)
        for n in REPLICA_COUNTS
    ]


def herding_lines(results: list[HerdResult]) -> list[str]:
    """The RESULTS.md section (none when the section did not run)."""
    if not results:
        return []
    lines = [
        "## Herding between scrapes",
        "",
        f"Same total rate through nginx; the cheapest pair's engine runs {CHEAP_CONCURRENCY} "
        "requests at once (its profiled concurrency) and its latency rises with load, so the "
        "1 s budget fits it only while it is not full. Peak: the engine's own most running + "
        f"waiting; over: share of {SAMPLE_S * 1000:g} ms samples above {CHEAP_CONCURRENCY}.",
        "",
        "| load seen between scrapes | replicas | rate (rps) | requests | budget met "
        "| cheap peak in flight | cheap over | shares |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        shares = ", ".join(f"{p} {s:.0%}" for p, s in r.pair_shares.items())
        lines.append(
            f"| {r.mode} | {r.replicas} | {r.rate_rps:g} | {r.requests} "
            f"| {r.budget_met_ratio:.1%} | {r.cheap_peak_in_flight} / {CHEAP_CONCURRENCY} "
            f"| {r.cheap_over_ratio:.0%} | {shares} |"
        )
    return [*lines, ""]
