"""Scenario 3 (issue 32, finding 4): steady load at 1x and 2x of a mixed trace on a simulated
six-pair fleet, with flow control as shipped and with admission and flow off (every request
forwarded, as before issue 23).

The fleet is the routing-quality section's (Llama 3.1 8B at fp16, fp8, int8-w8a8 and
awq-int4, 70B at awq-int4 and fp8: two families, four precisions) without jitter, in a table
that says exactly what each engine does (its TTFT and TPOT per request decoding beside it,
its batch size as the profiled load, its accuracy): the simulator's truth, not a profile of
it. The trace is that section's generator over the profiler's shipped eval prompts at
`NOMINAL_RPS` (categories mixed, 8-64 output tokens decoded to the end, budgets from 8 to 16 ms
a token plus 60 ms, floors per category), sent without `X-Task-Category` by clients that do
not retry, open loop.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from bench.admission.stack import (
    FLOW_OFF,
    FLOW_ON,
    Busy,
    Router,
    Sample,
    post,
    router,
    sample_sum,
    session,
    watch_running,
)
from bench.common.in_process import family_table
from bench.common.machine import Cores
from bench.quality import fleet as qf
from bench.quality.trace import TraceRequest, make_trace
from contracts.routing_table import RoutingTable
from simulator import Fleet, SimFleetConfig, SimPairConfig, run_fleet

NOMINAL_RPS = 30.0
LOADS = (1.0, 2.0)
SEED = 20261207
RANKS = {"fp16": 0, "fp8": 1, "int8-w8a8": 2, "awq-int4": 3}
EVALSETS = Path(__file__).resolve().parents[2] / "profiler" / "evalsets"


@dataclass(frozen=True, slots=True)
class SteadyRun:
    load: float
    flow: bool  # flow control as shipped (False: admission and flow off)
    samples: tuple[Sample, ...]
    queued: float  # requests that waited in the router's queue (gearbox_flow_queued_total)
    busy: Busy  # the engines' running requests over the run, per engine


def truth_entry(p: qf.SimPair, url: str) -> dict[str, Any]:
    """`p`'s table entry as the simulator runs it (PURE)."""
    accuracy = dict(zip(qf.CATEGORIES, p.accuracy, strict=True))
    price = p.output_usd_per_mtok
    return {
        "pair": p.pair, "family": p.family, "quantization": p.quantization,
        "served_model_name": p.name, "endpoints": [{"id": f"{p.pair}#0", "url": url}],
        "context_length": 8192, "chars_per_token": 4.0,
        "input_usd_per_mtok": price / 4, "output_usd_per_mtok": price,
        "price_source": "explicit", "sustained_output_tokens_per_s": 1000.0,
        "latency": {
            "quantile": 0.95, "ttft_base_s": p.ttft_base_s,
            "ttft_per_input_token_s": p.ttft_per_input_token_s, "ttft_per_load_s": 0.0,
            "tpot_base_s": p.tpot_base_s - p.tpot_per_running_s,
            "tpot_per_load_s": p.tpot_per_running_s, "max_profiled_load": p.max_running,
        },
        "accuracy": accuracy, "accuracy_n": dict.fromkeys(qf.CATEGORIES, 400),
        "utility": dict(accuracy), "precision_rank": RANKS[p.quantization],
        "reference_cost_usd": (64 * price / 4 + 48 * price) / 1e6,
    }  # fmt: skip


def truth_table(urls: dict[str, str]) -> RoutingTable:
    entries = [truth_entry(p, urls[p.name]) for p in qf.PAIRS]
    entries.sort(key=lambda e: (e["reference_cost_usd"], e["pair"]))
    return family_table(entries, qf.POLICY, qf.POLICY["baselines"])


def engines() -> SimFleetConfig:
    return SimFleetConfig(
        pairs=[
            SimPairConfig(
                name=p.name, family=p.family, quantization=p.quantization,
                ttft_base_s=p.ttft_base_s, ttft_per_input_token_s=p.ttft_per_input_token_s,
                tpot_base_s=p.tpot_base_s, tpot_per_running_s=p.tpot_per_running_s,
                max_running=p.max_running, max_queue=512, context_length=8192,
                accuracy=dict(zip(qf.CATEGORIES, p.accuracy, strict=True)),
            )
            for p in qf.PAIRS
        ]
    )  # fmt: skip


def trace(n: int) -> list[TraceRequest]:
    items = qf.read_items([EVALSETS / f"{c}.jsonl" for c in qf.CATEGORIES])
    return make_trace(items, qf.FLOORS, n, NOMINAL_RPS, SEED)


async def _send(s: aiohttp.ClientSession, url: str, r: TraceRequest, at: float) -> Sample:
    body = {
        "model": "auto",
        "messages": [{"role": "user", "content": r.prompt}],
        "max_tokens": r.max_tokens,
        "temperature": 0,
        "ignore_eos": True,  # decode exactly max_tokens tokens
    }
    headers = {
        "X-Latency-Budget-Ms": str(r.budget_ms),
        "X-Min-Accuracy": f"{r.min_accuracy:.2f}",
    }
    status, _ = await post(s, url, body, headers)
    return Sample("trace", "standard", status, time.monotonic() - at, r.budget_ms / 1000)


async def replay(url: str, requests: list[TraceRequest], load: float) -> tuple[Sample, ...]:
    async with session() as s:
        tasks: list[asyncio.Task[Sample]] = []
        start = time.monotonic() + 0.1
        for r in requests:
            at = start + r.at_s / load
            delay = at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(_send(s, url, r, at)))
        return tuple(await asyncio.gather(*tasks))


async def run_steady(workdir: Path, cores: Cores, seconds: float) -> tuple[SteadyRun, ...]:
    """Each load for `seconds` at 1x (the same requests, twice as dense, at 2x), flow on then
    off, each on a fresh data plane."""
    runs = []
    async with run_fleet(engines(), answers={}) as fleet:
        table = truth_table({p.name: fleet.url(p.name) for p in qf.PAIRS})
        for load in LOADS:
            requests = trace(round(NOMINAL_RPS * seconds * load))
            for flow, env in ((True, FLOW_ON), (False, FLOW_OFF)):
                with router(workdir / "steady", table, cores, env) as r:
                    runs.append(await _one(fleet, r, requests, (load, flow)))
    return tuple(runs)


async def _one(
    fleet: Fleet, r: Router, requests: list[TraceRequest], how: tuple[float, bool]
) -> SteadyRun:
    """One replay at `how` = (load, flow on), with the engines watched."""
    stop = asyncio.Event()
    watch = asyncio.create_task(watch_running(fleet, [p.name for p in qf.PAIRS], stop))
    samples = await replay(r.chat_url, requests, how[0])
    stop.set()
    text = await asyncio.to_thread(r.metrics)
    queued = sample_sum(text, "gearbox_flow_queued_total")
    return SteadyRun(how[0], how[1], samples, queued, await watch)
