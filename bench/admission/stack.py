"""What every admission scenario runs on: the data plane as its own process (pinned to the
proxy core, static mode: the table from a snapshot file, no Redis), so its CPU time is its
own, and the clients and simulated engines in this process's event loop; plus reading its
`/metrics` page (the queue's counters and wait histogram) and the answers as clients saw them.
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from bench.common.machine import Cores, pinned
from bench.common.processes import cpu_seconds, free_port, running
from bench.common.targets import gearbox_environment
from contracts.routing_table import RoutingTable
from simulator import Fleet

CHAT_PATH = "/v1/chat/completions"
# Flow control as shipped; admission and flow off: every request forwarded (before issue 23).
FLOW_ON: dict[str, str] = {}
FLOW_OFF = {"GEARBOX_DP_ADMISSION_SHED": "false", "GEARBOX_DP_FLOW_QUEUE": "false"}
QUEUE_OFF = {"GEARBOX_DP_FLOW_QUEUE": "false"}  # refusals at once instead of waits
TRUSTED = {"GEARBOX_DP_ADMISSION_PRIORITY_HEADER_TRUSTED": "true"}  # the client is the gateway


@dataclass(frozen=True, slots=True)
class Sample:
    """One request as its client saw it."""

    tenant: str
    priority: str
    status: int  # 0: no answer (connection error or client timeout)
    seconds: float  # from its (scheduled) send to the whole answer, or to its 429
    budget_s: float  # its latency budget (inf: none)
    in_burst: bool = False  # sent in the burst window (the burst scenario)

    @property
    def met(self) -> bool:
        return self.status == 200 and self.seconds <= self.budget_s


@dataclass(frozen=True, slots=True)
class Busy:
    """What the simulated engines ran over a run (the truth the router estimates): requests
    running at once, per engine, sampled every `SAMPLE_S`."""

    mean_running: float
    max_running: int


SAMPLE_S = 0.01


async def watch_running(fleet: Fleet, names: Sequence[str], stop: asyncio.Event) -> Busy:
    """Samples each engine's running count until `stop` is set."""
    seen: list[int] = []
    while not stop.is_set():
        seen += [fleet.stats(n).running for n in names]
        await asyncio.sleep(SAMPLE_S)
    return Busy(sum(seen) / len(seen) if seen else math.nan, max(seen, default=0))


@dataclass(frozen=True, slots=True)
class Router:
    """A running data plane: its base URL and pid."""

    url: str
    pid: int

    @property
    def chat_url(self) -> str:
        return self.url + CHAT_PATH

    def cpu_s(self) -> float:
        return cpu_seconds(self.pid)

    def metrics(self) -> str:
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as resp:
            return str(resp.read().decode())


@contextmanager
def router(
    workdir: Path, table: RoutingTable, cores: Cores, env: Mapping[str, str]
) -> Iterator[Router]:
    """A fresh data plane serving `table`, settings `env` over the defaults (it blocks until
    the router listens: enter it before any traffic)."""
    workdir.mkdir(parents=True, exist_ok=True)
    snapshot = workdir / f"table-{time.monotonic_ns()}.json"
    snapshot.write_text(table.model_dump_json())
    port = free_port()
    full_env = {**gearbox_environment(port, snapshot, None), **env}
    # `-m` puts the working directory first on sys.path, ahead of PYTHONPATH: a router asked
    # for from another tree (`env`'s PYTHONPATH, `critical --router-tree`) would otherwise be
    # this tree's data plane whenever the bench runs from its own root (`-P`: Python 3.11).
    flags = ["-P"] if "PYTHONPATH" in env else []
    args = pinned([sys.executable, *flags, "-m", "data_plane", "serve"], cores)
    log = workdir / f"data-plane-{port}.log"
    with running(args, log, env=full_env, port=port) as proc:
        yield Router(f"http://127.0.0.1:{port}", proc.pid)


def session(limit: int = 0) -> aiohttp.ClientSession:
    """A client session with no client-side queue in front of the router (`limit` 0)."""
    connector = aiohttp.TCPConnector(limit=limit)
    return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60))


async def post(
    s: aiohttp.ClientSession, url: str, body: Mapping[str, object], headers: Mapping[str, str]
) -> tuple[int, str | None]:
    """Status and Retry-After of one request (status 0: no answer)."""
    try:
        async with s.post(url, data=json.dumps(body), headers={**headers, **_JSON}) as resp:
            await resp.read()
            return resp.status, resp.headers.get("Retry-After")
    except (aiohttp.ClientError, TimeoutError):
        return 0, None


_JSON = {"Content-Type": "application/json"}


def sample_sum(text: str, name: str, **labels: str) -> float:
    """The sum of every sample of metric `name` whose labels include `labels`."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        head, _, value = line.rpartition(" ")
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            total += float(value)
    return total


def wait_histogram(text: str, name: str) -> list[tuple[float, float]]:
    """Cumulative (upper bound, count) buckets of histogram `name`, every series summed."""
    buckets: dict[float, float] = {}
    for line in text.splitlines():
        if not line.startswith(name + "_bucket{"):
            continue
        head, _, value = line.rpartition(" ")
        le = head.split('le="')[1].split('"')[0]
        bound = math.inf if le == "+Inf" else float(le)
        buckets[bound] = buckets.get(bound, 0.0) + float(value)
    return sorted(buckets.items())


def bucket_quantile(cumulative: list[tuple[float, float]], q: float) -> float:
    """The upper bound of the bucket that holds quantile `q` of cumulative (upper bound,
    count) buckets: `q` of the observations are at most this (PURE); NaN when empty."""
    if not cumulative or cumulative[-1][1] == 0:
        return math.nan
    rank = q * cumulative[-1][1]
    return next(bound for bound, count in cumulative if count >= rank)
