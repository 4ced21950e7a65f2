"""`python -m bench replicas`: 1, 2 and 4 data planes behind nginx, on one Redis, in front of
the simulator, at the same total request rate; halfway through, the cheapest pair's engine
starts answering 503 (docs/data_plane.md, "Breaker announcements").

Reported per replica count: budget attainment (answered 200 within the latency budget),
the share of requests per pair, decision agreement (the same `/v1/route` probe sent to every
replica at once: the fraction of probes on which all chose the same pair) and, per replica,
the time from the engine's failure until that replica no longer chooses it. The same command
then runs `bench/replicas/herding.py` (load between scrapes, in-flight sharing).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import redis.asyncio as aioredis
from aiohttp import ClientError, ClientSession, ClientTimeout, TCPConnector

from bench.common.backend import load_balancer_conf
from bench.common.machine import Pinning, pinned
from bench.common.processes import free_port, running
from bench.common.targets import gearbox_environment
from bench.soak.section import KEY_PREFIX, soak_simulator, soak_table
from contracts.redis_keys import RedisKeys
from control_plane.settings import PublisherOptions
from control_plane.store.publisher import Publisher
from demo.redis_launcher import private_redis

REPLICA_COUNTS = (1, 2, 4)
BUDGET_MS = 1000
PROBE = json.dumps(
    {"model": "auto", "max_tokens": 16, "messages": [{"role": "user", "content": "probe"}]}
)


@dataclass(frozen=True, slots=True)
class ReplicaPlan:
    rate_rps: float = 40.0  # total, whatever the replica count
    duration_s: float = 20.0
    probe_period_s: float = 0.05


@dataclass
class ReplicaResult:
    replicas: int
    rate_rps: float
    requests: int
    budget_met_ratio: float
    pair_shares: dict[str, float]
    agreement_ratio: float
    ejection_s: list[float | None]  # per replica; None = still choosing the dead engine at the end


@dataclass
class Tally:
    statuses: Counter[int] = field(default_factory=Counter)
    met: int = 0
    pairs: Counter[str] = field(default_factory=Counter)
    probes: int = 0
    agreed: int = 0


async def _request(session: ClientSession, url: str, i: int, tally: Tally) -> None:
    body = {"model": "auto", "max_tokens": 16, "messages": [{"role": "user", "content": f"r{i}"}]}
    started = time.monotonic()
    try:
        async with session.post(
            url, json=body, headers={"X-Latency-Budget-Ms": str(BUDGET_MS)}
        ) as resp:
            await resp.read()
            tally.statuses[resp.status] += 1
            if resp.status == 200:
                tally.pairs[resp.headers.get("X-Route-Pair", "?")] += 1
                tally.met += time.monotonic() - started <= BUDGET_MS / 1000
    except (ClientError, TimeoutError):
        tally.statuses[0] += 1


async def offer_load(url: str, plan: ReplicaPlan, tally: Tally, t0: float) -> None:
    connector = TCPConnector(limit=512)
    async with ClientSession(connector=connector, timeout=ClientTimeout(total=30)) as session:
        tasks = []
        for i in range(int(plan.rate_rps * plan.duration_s)):
            delay = t0 + i / plan.rate_rps - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(_request(session, url, i, tally)))
        await asyncio.gather(*tasks)


async def _choice(session: ClientSession, base: str) -> str | None:
    async with session.post(base + "/v1/route", data=PROBE) as resp:
        doc = await resp.json()
    pair = doc.get("pair")
    return pair if isinstance(pair, str) else None


async def _probe(
    bases: list[str], dead: str, plan: ReplicaPlan, tally: Tally, t0: float, killed: float
) -> list[float | None]:
    """Probe every replica until the end: agreement, and when each stopped choosing `dead`."""
    ejected: list[float | None] = [None] * len(bases)
    async with ClientSession(timeout=ClientTimeout(total=5)) as session:
        while time.monotonic() - t0 < plan.duration_s:
            choices = await asyncio.gather(*(_choice(session, b) for b in bases))
            tally.probes += 1
            tally.agreed += len(set(choices)) == 1
            now = time.monotonic()
            for i, choice in enumerate(choices):
                if now >= killed and ejected[i] is None and choice != dead:
                    ejected[i] = now - killed
            await asyncio.sleep(plan.probe_period_s)
    return ejected


async def _kill(fault_url: str, at: float) -> None:
    await asyncio.sleep(max(0.0, at - time.monotonic()))
    async with (
        ClientSession(timeout=ClientTimeout(total=5)) as session,
        session.post(fault_url, json={"error_rate": 1.0}) as resp,
    ):
        resp.raise_for_status()


async def _drive(
    lb: str, bases: list[str], urls: dict[str, str], redis_url: str, plan: ReplicaPlan, n: int
) -> ReplicaResult:
    table = soak_table(urls, 0)
    dead = table.entries[0]
    client = aioredis.Redis.from_url(redis_url)
    try:
        await Publisher(client, RedisKeys(KEY_PREFIX), PublisherOptions()).publish(table)
    finally:
        await client.aclose()
    await asyncio.gather(*(wait_ready(b) for b in bases))
    tally = Tally()
    t0 = time.monotonic()
    killed = t0 + plan.duration_s / 2
    fault_url = urls[dead.served_model_name] + "/sim/faults"
    _, ejected, _ = await asyncio.gather(
        offer_load(lb + "/v1/chat/completions", plan, tally, t0),
        _probe(bases, dead.pair, plan, tally, t0, killed),
        _kill(fault_url, killed),
    )
    total = sum(tally.statuses.values())
    served = sum(tally.pairs.values()) or 1
    return ReplicaResult(
        replicas=n,
        rate_rps=plan.rate_rps,
        requests=total,
        budget_met_ratio=tally.met / max(1, total),
        pair_shares={p: c / served for p, c in sorted(tally.pairs.items())},
        agreement_ratio=tally.agreed / max(1, tally.probes),
        ejection_s=ejected,
    )


async def wait_ready(base: str) -> None:
    async with ClientSession(timeout=ClientTimeout(total=2)) as session:
        for _ in range(300):
            with contextlib.suppress(ClientError, TimeoutError):
                async with session.get(base + "/readyz") as r:
                    if r.status == 200:
                        return
            await asyncio.sleep(0.1)
    raise RuntimeError(f"replica {base} never became ready")


@contextlib.contextmanager
def replica_fleet(
    workdir: Path, n: int, redis_url: str, pinning: Pinning, extra_env: dict[str, str] | None = None
) -> Iterator[tuple[str, list[str]]]:
    """`n` data planes and nginx in front; yields (load balancer URL, replica URLs)."""
    with contextlib.ExitStack() as stack:
        ports = [free_port() for _ in range(n)]
        for i, port in enumerate(ports):
            env = gearbox_environment(port, workdir / f"dp-{i}.json", None, redis_url)
            env |= {
                "GEARBOX_DP_REDIS_KEY_PREFIX": KEY_PREFIX,
                "GEARBOX_DP_INSTANCE_ID": f"dp-{i}",
                "GEARBOX_DP_TABLE_POLL_INTERVAL_S": "1",
                "GEARBOX_DP_BREAKER_COOLDOWN_S": "60",
                "GEARBOX_DP_BREAKER_MAX_COOLDOWN_S": "60",
            }
            env |= extra_env or {}
            args = pinned([sys.executable, "-m", "data_plane", "serve"], pinning.proxy)
            stack.enter_context(running(args, workdir / f"dp-{i}.log", env=env, port=port))
        lb_port = free_port()
        conf = workdir / "lb" / "nginx.conf"
        conf.parent.mkdir(parents=True, exist_ok=True)
        conf.write_text(load_balancer_conf(conf.parent, lb_port, [(p, 1) for p in ports]))
        binary = shutil.which("nginx") or "/usr/sbin/nginx"
        lb = pinned([binary, "-c", str(conf), "-p", str(conf.parent), "-e", "stderr"], pinning.aux)
        stack.enter_context(running(lb, workdir / "lb.log", port=lb_port))
        yield f"http://127.0.0.1:{lb_port}", [f"http://127.0.0.1:{p}" for p in ports]


def run_replicas(pinning: Pinning, workdir: Path, quick: bool) -> list[ReplicaResult]:
    plan = ReplicaPlan(duration_s=6.0) if quick else ReplicaPlan()
    results = []
    for n in REPLICA_COUNTS:
        folder = workdir / f"x{n}"
        folder.mkdir(parents=True, exist_ok=True)
        with (
            private_redis() as redis_url,
            soak_simulator(folder, pinning.aux) as urls,
            replica_fleet(folder, n, redis_url, pinning) as (lb, bases),
        ):
            results.append(asyncio.run(_drive(lb, bases, urls, redis_url, plan, n)))
    return results


def replica_lines(results: list[ReplicaResult]) -> list[str]:
    """The RESULTS.md section."""
    lines = [
        "## Replicas behind a load balancer",
        "",
        "Same total rate through nginx; halfway, the cheapest pair's engine answers 503. "
        "Ejection: seconds from then until each replica stops choosing it (`—`: never).",
        "",
        "| replicas | rate (rps) | requests | budget met | decision agreement "
        "| ejection (s) | shares |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        ejection = ", ".join("—" if t is None else f"{t:.2f}" for t in r.ejection_s)
        shares = ", ".join(f"{p} {s:.0%}" for p, s in r.pair_shares.items())
        lines.append(
            f"| {r.replicas} | {r.rate_rps:g} | {r.requests} | {r.budget_met_ratio:.1%} "
            f"| {r.agreement_ratio:.1%} | {ejection} | {shares} |"
        )
    return [*lines, ""]
