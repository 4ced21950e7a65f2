"""Per-replica CPU of the replicas' shared state (in-flight sharing, breaker announcements) at
N replicas x E endpoints, simulated on one real redis-server (docs/benchmarks.md, "Scale").

The N replicas run in worker processes of at most `PER_WORKER` each (`fleet_worker`), every one
on its own Redis connection; a replica's CPU is the workers' CPU over the measured window
divided by N (so it includes the event loop's share and the simulated requests' churn). Redis's
own CPU over the window is read from `INFO cpu`.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import dataclass
from typing import Literal

import redis

from bench.scale.fleet_worker import ANNOUNCE_PERIOD_S, INTERVAL_S, TTL_S
from demo.redis_launcher import private_redis

PER_WORKER = 8
Mode = Literal["sharing", "breakers"]


@dataclass(frozen=True, slots=True)
class FleetResult:
    mode: Mode
    replicas: int
    endpoints: int
    seconds: float  # the measured window
    cpu_per_replica_ratio: float  # of one core, as measured
    work_per_replica_per_s: float  # exchanges answered, or announcements heard
    nominal_per_replica_per_s: float  # what the settings ask for
    cpu_per_unit_us: float  # CPU per exchange, or per announcement heard
    redis_cpu_ratio: float  # redis-server's CPU over the window, of one core

    @property
    def at_nominal_ratio(self) -> float:
        """CPU per replica at the nominal rate: the measured cost of one unit times the rate
        the settings ask for (the same as measured unless the machine could not keep up)."""
        return self.cpu_per_unit_us * self.nominal_per_replica_per_s / 1e6


def nominal_rate(mode: Mode, replicas: int, endpoints: int) -> float:
    """Exchanges per second per replica (sharing; others are heard), or announcements heard
    per second per replica (every replica announces every endpoint once per period)."""
    if mode == "sharing":
        return 1.0 / INTERVAL_S if replicas > 1 else 2.0 / TTL_S
    return (replicas - 1) * endpoints / ANNOUNCE_PERIOD_S


def _redis_cpu_s(url: str) -> float:
    info = redis.Redis.from_url(url).info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _report(proc: subprocess.Popen[bytes], timeout_s: float) -> dict[str, float]:
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired as timeout:
        raise RuntimeError("a fleet worker did not finish") from timeout
    if proc.returncode != 0:
        raise RuntimeError(f"fleet worker failed: {err.decode()[-2000:]}")
    report: dict[str, float] = json.loads(out.decode().strip().splitlines()[-1])
    return report


def measure_fleet(mode: Mode, replicas: int, endpoints: int, seconds: float) -> FleetResult:
    """Run the simulated fleet on a fresh redis-server; raises RuntimeError if a worker fails."""
    workers = math.ceil(replicas / PER_WORKER)
    with private_redis() as url:
        redis_before = _redis_cpu_s(url)
        procs = []
        for w in range(workers):
            first = w * PER_WORKER
            count = min(PER_WORKER, replicas - first)
            args = [sys.executable, "-m", "bench.scale.fleet_worker", "--mode", mode]
            args += ["--redis-url", url, "--replicas", str(count), "--first", str(first)]
            args += ["--endpoints", str(endpoints), "--seconds", str(seconds)]
            procs.append(subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        try:
            reports = [_report(proc, seconds + 60) for proc in procs]
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        redis_cpu = _redis_cpu_s(url) - redis_before
    cpu = sum(r["cpu_s"] for r in reports)
    wall = max(r["wall_s"] for r in reports)
    work = sum(r["work"] for r in reports)
    return FleetResult(
        mode=mode,
        replicas=replicas,
        endpoints=endpoints,
        seconds=wall,
        cpu_per_replica_ratio=cpu / wall / replicas,
        work_per_replica_per_s=work / wall / replicas,
        nominal_per_replica_per_s=nominal_rate(mode, replicas, endpoints),
        cpu_per_unit_us=cpu / work * 1e6 if work else math.nan,
        redis_cpu_ratio=redis_cpu / wall,
    )
