"""`python -m bench soak`: the data plane under steady mixed traffic for 10 minutes, while one
pair's engine flaps (simulator faults toggled, so its breaker opens and closes) and the control
plane's publisher republishes the table every minute through a real Redis.

Pass: no request fails (faults are absorbed by retries and fallback before the first byte),
RSS and open file descriptors stay flat, and the data plane follows every republish.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from aiohttp import ClientError, ClientSession, ClientTimeout, TCPConnector

from bench.common.machine import Cores, Pinning, pinned
from bench.common.processes import fd_count, free_port, rss_bytes, running
from bench.common.tables import synthetic_table
from bench.common.targets import gearbox_environment
from bench.soak.results import SoakResult
from contracts.redis_keys import RedisKeys
from contracts.routing_table import RoutingTable, stamp_table
from control_plane.settings import PublisherOptions
from control_plane.store.publisher import Publisher, PublishOutcome
from demo.redis_launcher import private_redis

N_PAIRS = 4
KEY_PREFIX = "soak"


@dataclass(frozen=True, slots=True)
class SoakPlan:
    duration_s: float
    rate_rps: float = 40.0
    stream_share: float = 0.5
    fault_period_s: float = 15.0  # faults on for one period, off for the next
    publish_period_s: float = 60.0
    sample_period_s: float = 10.0


@dataclass
class _Tally:
    requests: int = 0
    ok: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    versions: list[tuple[float, int]] = field(default_factory=list)
    rss: list[int] = field(default_factory=list)
    fds: list[int] = field(default_factory=list)
    published: list[int] = field(default_factory=list)
    toggles: int = 0
    metrics: dict[str, float] = field(default_factory=dict)

    def fail(self, kind: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1


def plan_for(duration_s: float) -> SoakPlan:
    """Short runs (smoke) keep every event in scale: several toggles and republishes."""
    if duration_s >= 300:
        return SoakPlan(duration_s)
    return SoakPlan(
        duration_s,
        fault_period_s=duration_s / 8,
        publish_period_s=duration_s / 4,
        sample_period_s=duration_s / 10,
    )


def soak_table(urls: dict[str, str], revision: int) -> RoutingTable:
    """The synthetic 4-pair table pointed at the simulator; each revision shifts the latency
    model a little, so every publish is a real new version."""
    base = synthetic_table(N_PAIRS, [["http://127.0.0.1:1"]])
    data = base.model_dump(mode="json")
    for entry in data["entries"]:
        entry["endpoints"] = [{"id": f"{entry['pair']}#0", "url": urls[entry["served_model_name"]]}]
        entry["latency"]["ttft_base_s"] *= 1 + 0.01 * revision
    return stamp_table(data)


def sim_fleet(table: RoutingTable) -> dict[str, Any]:
    return {
        "pairs": [
            {
                "name": e.served_model_name,
                "family": e.family,
                "quantization": e.quantization,
                "ttft_base_s": 0.005,
                "tpot_base_s": 0.002,
                "max_running": 64,
                "max_queue": 1024,
                "context_length": 32768,
                "seed": i,
            }
            for i, e in enumerate(table.entries)
        ]
    }


@contextmanager
def soak_simulator(workdir: Path, cpus: Cores) -> Any:
    draft = synthetic_table(N_PAIRS, [["http://127.0.0.1:1"]])
    fleet, ports = workdir / "soak-fleet.json", workdir / "soak-ports.json"
    fleet.write_text(json.dumps(sim_fleet(draft)))
    args = [sys.executable, "-m", "simulator", "serve", "--fleet", str(fleet)]
    with running(pinned([*args, "--ports-file", str(ports)], cpus), workdir / "sim.log") as proc:
        deadline = time.monotonic() + 60
        while not ports.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("soak simulator did not start")
            time.sleep(0.1)
        yield dict(json.loads(ports.read_text()))


async def _one(session: ClientSession, url: str, stream: bool, tally: _Tally, t0: float) -> None:
    body = {
        "model": "auto",
        "max_tokens": 16,
        "stream": stream,
        "messages": [{"role": "user", "content": f"soak request {tally.requests}"}],
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    tally.requests += 1
    try:
        async with session.post(url, json=body, headers={"X-Latency-Budget-Ms": "5000"}) as r:
            data = await r.read()
            version = r.headers.get("X-Route-Table-Version")
    except (ClientError, TimeoutError) as err:
        tally.fail(type(err).__name__)
        return
    if r.status != 200:
        tally.fail(f"status {r.status}")
    elif stream and (not data.rstrip().endswith(b"data: [DONE]") or b'"error"' in data):
        tally.fail("broken stream")
    elif not stream and b'"choices"' not in data:
        tally.fail("bad body")
    else:
        tally.ok += 1
        if version:
            tally.versions.append((time.monotonic() - t0, int(version)))


async def _load(url: str, plan: SoakPlan, tally: _Tally, t0: float) -> None:
    rng = random.Random(7)
    connector = TCPConnector(limit=1024)
    async with ClientSession(connector=connector, timeout=ClientTimeout(total=30)) as session:
        tasks = set()
        n = int(plan.rate_rps * plan.duration_s)
        for i in range(n):
            delay = t0 + i / plan.rate_rps - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            task = asyncio.create_task(
                _one(session, url, rng.random() < plan.stream_share, tally, t0)
            )
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        await asyncio.gather(*tasks)


async def _flap(fault_url: str, plan: SoakPlan, tally: _Tally, t0: float) -> None:
    async with ClientSession(timeout=ClientTimeout(total=5)) as session:
        on = False
        while time.monotonic() - t0 + plan.fault_period_s < plan.duration_s:
            await asyncio.sleep(plan.fault_period_s)
            on = not on
            async with session.post(fault_url, json={"error_rate": 1.0 if on else 0.0}) as r:
                r.raise_for_status()
            tally.toggles += 1
        if on:
            async with session.post(fault_url, json={"error_rate": 0.0}) as r:
                r.raise_for_status()


async def _republish(
    publisher: Publisher, urls: dict[str, str], plan: SoakPlan, tally: _Tally, t0: float
) -> None:
    revision = 1
    while time.monotonic() - t0 + plan.publish_period_s < plan.duration_s:
        await asyncio.sleep(plan.publish_period_s)
        result = await publisher.publish(soak_table(urls, revision))
        if result.outcome is PublishOutcome.PUBLISHED:
            tally.published.append(result.version)
        revision += 1


async def _sample(pid: int, plan: SoakPlan, tally: _Tally, t0: float) -> None:
    while time.monotonic() - t0 < plan.duration_s:
        await asyncio.sleep(plan.sample_period_s)
        tally.rss.append(rss_bytes(pid))
        tally.fds.append(fd_count(pid))


async def _drive(
    url: str, pid: int, urls: dict[str, str], fault_url: str, redis_url: str, plan: SoakPlan
) -> _Tally:
    tally = _Tally()
    client = aioredis.Redis.from_url(redis_url)
    try:
        publisher = Publisher(client, RedisKeys(KEY_PREFIX), PublisherOptions())
        first = await publisher.publish(soak_table(urls, 0))
        tally.published.append(first.version)
        await _wait_ready(url.rsplit("/v1/", 1)[0])
        t0 = time.monotonic()
        await asyncio.gather(
            _load(url, plan, tally, t0),
            _flap(fault_url, plan, tally, t0),
            _republish(publisher, urls, plan, tally, t0),
            _sample(pid, plan, tally, t0),
        )
        tally.metrics = await _scrape(url.rsplit("/v1/", 1)[0] + "/metrics")
    finally:
        await client.aclose()
    return tally


def sum_metrics(text: str, names: tuple[str, ...]) -> dict[str, float]:
    """Sum every sample of each named metric (all label sets) in Prometheus text format."""
    sums = dict.fromkeys(names, 0.0)
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in sums:
            sums[name] += float(line.rsplit(" ", 1)[1])
    return sums


async def _scrape(url: str) -> dict[str, float]:
    async with ClientSession(timeout=ClientTimeout(total=10)) as session, session.get(url) as r:
        text = await r.text()
    return sum_metrics(text, ("gearbox_circuit_transitions_total", "gearbox_fallbacks_total"))


async def _wait_ready(base: str) -> None:
    async with ClientSession(timeout=ClientTimeout(total=2)) as session:
        for _ in range(300):
            try:
                async with session.get(base + "/readyz") as r:
                    if r.status == 200:
                        return
            except ClientError:
                pass
            await asyncio.sleep(0.1)
    raise RuntimeError("data plane never became ready (no table from Redis)")


def run_soak(pinning: Pinning, workdir: Path, duration_s: float) -> SoakResult:
    workdir.mkdir(parents=True, exist_ok=True)
    plan = plan_for(duration_s)
    with private_redis() as redis_url, soak_simulator(workdir, pinning.aux) as urls:
        cheapest = soak_table(urls, 0).entries[0].served_model_name
        port = free_port()
        env = gearbox_environment(port, workdir / "snapshot.json", None, redis_url)
        env.update(
            {"GEARBOX_DP_REDIS_KEY_PREFIX": KEY_PREFIX, "GEARBOX_DP_TABLE_POLL_INTERVAL_S": "2"}
        )
        args = pinned([sys.executable, "-m", "data_plane", "serve"], pinning.proxy)
        with running(args, workdir / "data-plane.log", env=env, port=port) as proc:
            tally = asyncio.run(
                _drive(
                    f"http://127.0.0.1:{port}/v1/chat/completions",
                    proc.pid,
                    urls,
                    urls[cheapest] + "/sim/faults",
                    redis_url,
                    plan,
                )
            )
    return _result(plan, tally)


def _result(plan: SoakPlan, tally: _Tally) -> SoakResult:
    if not tally.rss:
        raise RuntimeError("the soak took no memory samples")
    first = max(0, min(len(tally.rss) - 1, int(60 / plan.sample_period_s) - 1))
    if plan.duration_s < 300:
        first = min(len(tally.rss) - 1, 1)
    last_minute = plan.duration_s - min(60.0, plan.publish_period_s)
    served = [v for t, v in tally.versions if t >= last_minute]
    return SoakResult(
        duration_s=plan.duration_s,
        rate_rps=plan.rate_rps,
        requests=tally.requests,
        ok=tally.ok,
        unexpected_errors=tally.requests - tally.ok,
        rss_first_bytes=tally.rss[first],
        rss_last_bytes=tally.rss[-1],
        fds_first=tally.fds[first],
        fds_last=tally.fds[-1],
        tables_published=len(tally.published),
        last_published_version=tally.published[-1],
        last_served_version=max(served, default=0),
        fault_toggles=tally.toggles,
        breaker_transitions=int(tally.metrics.get("gearbox_circuit_transitions_total", 0)),
        fallbacks=int(tally.metrics.get("gearbox_fallbacks_total", 0)),
        rss_samples_bytes=tuple(tally.rss),
        fd_samples=tuple(tally.fds),
        error_kinds=tuple(sorted(tally.errors.items())),
    )
