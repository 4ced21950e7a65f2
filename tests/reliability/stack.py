"""The system under test, assembled as in production: simulated engines, profile reports for
them, the table the control plane's pure builder makes from those reports, the control plane's
publisher, a data plane from `create_app`, and a steady client load to measure it with."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry

from contracts.policy import Policy
from contracts.profile_report import ProfileReport
from contracts.routing_table import RoutingTable
from control_plane.build.table import build_table
from data_plane.app import METRICS
from data_plane.settings import DataPlaneSettings
from simulator import SimPairConfig

FAMILY = "llama-3.1-8b-instruct"
CHEAP, PRICEY = "fp8", "fp16"  # the cheap pair serves; the pricey one is the fallback
PRICE_USD_PER_MTOK = {CHEAP: 0.10, PRICEY: 0.40}
EXAMPLES = Path("examples/profiles")
NOW = datetime(2026, 11, 1, tzinfo=UTC)


def served_name(quant: str) -> str:
    return f"sim/{FAMILY}-{quant}"


def pair_of(quant: str) -> str:
    return f"{FAMILY}@{quant}"


def sim_pair(quant: str, **kw: Any) -> SimPairConfig:
    """A fast simulated engine for `FAMILY@quant` (a few ms per answer)."""
    base: dict[str, Any] = {
        "name": served_name(quant),
        "family": FAMILY,
        "quantization": quant,
        "ttft_base_s": 0.003,
        "tpot_base_s": 0.0005,
        "max_running": 64,
        "context_length": 32768,
    }
    return SimPairConfig(**{**base, **kw})


def report(quant: str, urls: Sequence[str], price_bump: float = 0.0) -> ProfileReport:
    """The shipped example report of `FAMILY@quant`, served by `urls` at a fixed price."""
    data = json.loads((EXAMPLES / f"{FAMILY}@{quant}.json").read_text(encoding="utf-8"))
    price = PRICE_USD_PER_MTOK[quant] + price_bump
    data |= {
        "endpoints": list(urls),
        "served_model_name": served_name(quant),
        "prices": {"input_usd_per_mtok": price, "output_usd_per_mtok": 2 * price},
    }
    return ProfileReport.model_validate(data)


def fleet_reports(
    urls: Mapping[str, Sequence[str]], price_bump: float = 0.0
) -> list[ProfileReport]:
    return [report(q, u, price_bump) for q, u in urls.items()]


def fleet_table(urls: Mapping[str, Sequence[str]], price_bump: float = 0.0) -> RoutingTable:
    """What the control plane builds for these engines (a new `price_bump`, a new content)."""
    return build_table(fleet_reports(urls, price_bump), Policy(), NOW)


def dp_settings(redis_url: str, prefix: str, snapshot: Path, **kw: Any) -> DataPlaneSettings:
    """Data-plane settings with short intervals, so faults show within a second or two."""
    base: dict[str, Any] = {
        "host": "127.0.0.1",
        "redis_url": redis_url,
        "redis_key_prefix": prefix,
        "snapshot_path": snapshot,
        "table_poll_interval_s": 0.2,
        "redis_timeout_s": 0.5,
        "redis_backoff_max_s": 0.3,
        "live_state_interval_s": 0.5,
        "breaker_consecutive_failures": 3,
        "breaker_cooldown_s": 0.5,
        "breaker_cooldown_max_s": 2.0,
        "connect_timeout_s": 1.0,
        "instance_id": "rel-dp",
        "feedback_canary_items_per_minute": 0.0,  # on by default; tests that mean them say so
    }
    return DataPlaneSettings(**{**base, **kw})


def chat_body(stream: bool = False, max_tokens: int = 8, model: str = "auto") -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": "Say hello to the reliability suite."}],
        "max_tokens": max_tokens,
        "stream": stream,
    }


def registry_of(app: web.Application) -> CollectorRegistry:
    return app[METRICS].registry


def metric(app: web.Application, name: str, **labels: str) -> float:
    value = registry_of(app).get_sample_value(name, labels)
    return 0.0 if value is None else value


@dataclass
class Tally:
    """What the load saw: answers by status and pair, and every unexpected outcome."""

    statuses: Counter[int] = field(default_factory=Counter)
    pairs: Counter[str] = field(default_factory=Counter)
    versions: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.statuses.values())


class SteadyLoad:
    """`workers` clients each sending one non-streaming chat request after another, with a
    short pause, until stopped. Every answer that is not a complete 200 is a problem."""

    def __init__(self, url: str, workers: int = 4, pause_s: float = 0.01) -> None:
        self.url = url
        self.workers = workers
        self.pause_s = pause_s
        self.tally = Tally()
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> SteadyLoad:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        self._tasks = [asyncio.create_task(self._worker()) for _ in range(self.workers)]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)
        await self._session.close()

    async def answered(self, n: int) -> None:
        """Wait until `n` more requests have been answered (bounded)."""
        target = self.tally.total + n

        async def done() -> bool:
            return self.tally.total >= target

        deadline = asyncio.get_running_loop().time() + 60
        while not await done():
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"load stalled at {self.tally.total} answers")
            await asyncio.sleep(0.02)

    async def _worker(self) -> None:
        body = json.dumps(chat_body()).encode()
        headers = {"Content-Type": "application/json"}
        while not self._stop.is_set():
            try:
                async with self._session.post(
                    f"{self.url}/v1/chat/completions", data=body, headers=headers
                ) as resp:
                    data = await resp.read()
                    self._record(resp, data)
            except (aiohttp.ClientError, TimeoutError) as err:
                self.tally.statuses[0] += 1
                self.tally.problems.append(f"client error {type(err).__name__}: {err}")
            await asyncio.sleep(self.pause_s)

    def _record(self, resp: aiohttp.ClientResponse, data: bytes) -> None:
        tally = self.tally
        tally.statuses[resp.status] += 1
        tally.pairs[resp.headers.get("X-Route-Pair", "-")] += 1
        tally.versions[resp.headers.get("X-Route-Table-Version", "-")] += 1
        if resp.status != 200:
            tally.problems.append(f"HTTP {resp.status}: {data[:300]!r}")
        elif not json.loads(data).get("choices"):
            tally.problems.append(f"200 without choices: {data[:300]!r}")
