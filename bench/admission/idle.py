"""Scenario 1 (issue 32, finding 1): one client, strictly one request at a time, on an idle
fleet: nothing is ever in flight when a request arrives, so the truth is that no request
may be refused, whatever its budget and `max_tokens`.

The table is what the control plane builds from the shipped example profiles of Llama 3.1 8B
at four precisions (`examples/profiles`); the engines behind it are simulated and answer in
a few milliseconds (faster than profiled: the router's decisions for a sequential client
depend on the profile and the in-flight counts, not on the engine's speed), and every answer
stops after about 15 tokens whatever `max_tokens` allows, as capped answers usually do. The
requests cycle through a grid of latency budgets and `max_tokens` (default class, one tenant).
"""

from __future__ import annotations

import itertools
import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from bench.admission.stack import FLOW_ON, Sample, post, router, session
from bench.common.machine import Cores
from contracts.policy import Policy
from contracts.profile_report import ProfileReport
from contracts.routing_table import RoutingTable
from control_plane.build.table import build_table
from simulator import SimFleetConfig, SimPairConfig, run_fleet
from simulator.answer_key import KnownAnswer

FAMILY = "llama-3.1-8b-instruct"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "profiles"
PRICES = {"fp16": 0.40, "fp8": 0.10, "int8-w8a8": 0.12, "awq-int4": 0.08}  # input; output 2x
BUDGETS_MS: tuple[int | None, ...] = (2000, 6100, 15000, None)
MAX_TOKENS = (16, 256, 1000)
PROMPT = "Say hello to the new team in one friendly sentence."
ANSWER = "Hello, team: welcome aboard, we are glad to have you here!"  # about 15 tokens


@dataclass(frozen=True, slots=True)
class IdleResult:
    requests: int
    samples: tuple[tuple[int | None, int, Sample], ...]  # (budget ms, max_tokens, sample)


def served_name(quant: str) -> str:
    return f"sim/{FAMILY}-{quant}"


def example_table(urls: dict[str, str]) -> RoutingTable:
    """The table built from the shipped 8B example reports, each served at `urls[quant]`."""
    reports = []
    for quant, url in urls.items():
        data = json.loads((EXAMPLES / f"{FAMILY}@{quant}.json").read_text(encoding="utf-8"))
        price = PRICES[quant]
        data |= {
            "endpoints": [url],
            "served_model_name": served_name(quant),
            "prices": {"input_usd_per_mtok": price, "output_usd_per_mtok": 2 * price},
        }
        reports.append(ProfileReport.model_validate(data))
    return build_table(reports, Policy(), datetime(2026, 11, 1, tzinfo=UTC))


def _engine(quant: str) -> SimPairConfig:
    return SimPairConfig(
        name=served_name(quant), family=FAMILY, quantization=quant, ttft_base_s=0.003,
        tpot_base_s=0.0005, max_running=64, context_length=32768,
    )  # fmt: skip


def grid() -> list[tuple[int | None, int]]:
    return list(itertools.product(BUDGETS_MS, MAX_TOKENS))


async def _ask(url: str, requests: int) -> list[tuple[int | None, int, Sample]]:
    """`requests` sent one after another, cycling through the grid."""
    cells = grid()
    out: list[tuple[int | None, int, Sample]] = []
    async with session() as s:
        for i in range(requests):
            budget_ms, max_tokens = cells[i % len(cells)]
            body = {
                "model": "auto",
                "messages": [{"role": "user", "content": PROMPT}],
                "max_tokens": max_tokens,
            }
            headers = {} if budget_ms is None else {"X-Latency-Budget-Ms": str(budget_ms)}
            started = time.monotonic()
            status, _ = await post(s, url, body, headers)
            budget_s = float("inf") if budget_ms is None else budget_ms / 1000
            sample = Sample("idle", "standard", status, time.monotonic() - started, budget_s)
            out.append((budget_ms, max_tokens, sample))
    return out


async def run_idle(workdir: Path, cores: Cores, requests: int) -> IdleResult:
    config = SimFleetConfig(pairs=[_engine(q) for q in PRICES])
    answers = {PROMPT: KnownAnswer("chat", ANSWER)}
    async with run_fleet(config, answers=answers) as fleet:
        table = example_table({q: fleet.url(served_name(q)) for q in PRICES})
        with router(workdir / "idle", table, cores, FLOW_ON) as r:
            out = await _ask(r.chat_url, requests)
    return IdleResult(requests, tuple(out))
