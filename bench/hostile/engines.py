"""Section 7's engine rows (issue 36): prompts the engine sizes larger than their text, and an
engine page too large to read, beside ordinary traffic.

In one process and event loop, on fresh simulated engines of one family (`fam@int4`, cheap;
`fam@fp16`, four times the price) and data planes from `create_app` in static mode:

- Tools-heavy prompts: the engines prefill as profiled (`PREFILL_S` per input token, context
  32,768, 4 characters per token in the table and in the simulator, which counts the `tools` JSON
  into the prompt as the chat template renders it, at the same 4: the table carries no measured
  JSON figure here, so the router's estimate and the engine's count agree). `ORDINARY` closed-loop
  clients send short streamed requests for `PINNED` (the reference pair, by name) through
  `TOOLS_SEGMENT_S` segments alternating without and with `HEAVY` more closed-loop clients sending
  streamed requests carrying about `TOOLS_TOKENS` tokens of `tools` (a few seconds of prefill
  each, no budget; routed, so to the cheap pair, whose counters then move only when their prefill
  ends), in one data plane, after one segment of the heavy clients alone (the issue's
  reproduction: on 95376ca, without other traffic, they were cut as hangs). Measured: the heavy
  requests' statuses, breaker openings, the engines' prompt tokens over the router's estimate
  (`gearbox_prompt_estimate_ratio`), and the ordinary clients' p99 in each kind of segment.
- A 48 MiB `/metrics` page: the cheap engine sits behind a loopback server (its own process,
  `bench.hostile.page_engine`, so writing the pages is not charged to this loop) that passes its
  chat completions through and answers `/metrics` with the engine's own page (clean) or with
  `PAGE_BYTES` of realistic histogram lines (hostile). The data plane scrapes at its defaults
  (every second, 4 MiB page limit). The ordinary clients run through `SEGMENT_S` segments
  alternating clean and hostile in one data plane, so the load of the machine (shared, noisy)
  falls on both alike; measured: the request p99 of each, and `gearbox_engine_scrape_errors_total`.
"""

from __future__ import annotations

import asyncio
import json
import math
import statistics
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from bench.common.in_process import Profiled, family_entry, family_table, static_data_plane
from bench.hostile.page_engine import PageControl, page_engine
from bench.hostile.segments import Paired, Pooled, paired, pooled
from contracts.routing_table import RoutingTable
from data_plane.app import METRICS
from data_plane.settings import ScrapeSettings
from simulator import SimFleetConfig, SimPairConfig, run_fleet

MiB = 1024 * 1024
PAGE_BYTES = 48 * MiB
ORDINARY, HEAVY = 4, 2
TTFT_S, TPOT_S = 0.03, 0.006
PREFILL_S = 0.00017  # per input token: the shipped 70B awq-int4 profile's figure
CONTEXT = 32_768
CHARS_PER_TOKEN = 4.0
TOOLS_TOKENS = 31_500  # the tool list: about 5.4 s of prefill at PREFILL_S
QUANTS = (("int4", 1.0), ("fp16", 4.0))
PINNED = "fam@fp16"  # what the tools row's ordinary clients ask for by name
SEGMENT_S = 1.0  # the page row alternates clean and hostile pages this often
TOOLS_SEGMENT_S = 4.0  # the tools row alternates without and with the heavy clients


@dataclass(frozen=True, slots=True)
class ToolsRow:
    heavy: dict[int, int]  # status -> count of the tools-heavy requests (-1: no answer)
    prompt_tokens: int  # what the engine counted for one of them
    openings: dict[str, int]  # endpoint -> breaker openings over the whole run
    estimate_ratio: float  # the engines' prompt tokens over the router's estimate (mean)
    estimate_n: int  # answers behind that mean
    p99_ms_without: float  # the ordinary clients' p99 in the segments without the heavy ones
    p99_ms_with: float
    ordinary: dict[int, int]  # status -> count of the ordinary requests, both kinds of segment
    # This process's CPU (data plane, simulated engines, clients) per ordinary request in each
    # kind of segment: steadier than wall latency on a shared machine
    cpu_ms_without: float = math.nan
    cpu_ms_with: float = math.nan
    # The ordinary clients' latencies per kind of segment, pooled, and each segment with the
    # heavy clients against the one without them just before it (bench/hostile/segments.py)
    pooled_without: Pooled | None = None
    pooled_with: Pooled | None = None
    paired: Paired | None = None


@dataclass(frozen=True, slots=True)
class PageRow:
    page_bytes: int
    p99_ms_clean: float  # the ordinary clients' request p99 while the page is the engine's own
    p99_ms_page: float  # ... while it is PAGE_BYTES
    requests: tuple[int, int]  # requests measured (clean, hostile page)
    non_200: int  # ordinary answers other than 200, both
    scrape_errors: int  # gearbox_engine_scrape_errors_total, all reasons
    pages_left_at_mib: float  # the most the page server wrote before the reader left
    cpu_ms_clean: float = math.nan  # this process's CPU per ordinary request, clean page
    cpu_ms_page: float = math.nan  # ... big page (the page server's own process not counted)
    pooled_clean: Pooled | None = None  # as ToolsRow's
    pooled_page: Pooled | None = None
    paired: Paired | None = None  # each big-page segment against the clean one before it


@dataclass(frozen=True, slots=True)
class EngineRows:
    seconds: float  # per kind of segment (without and with the heavy clients or the page)
    tools: ToolsRow
    page: PageRow


def p99_ms(latencies: list[float]) -> float:
    return statistics.quantiles(latencies, n=100)[98] * 1000 if len(latencies) > 1 else 0.0


def tools_list(tokens: int) -> list[dict[str, Any]]:
    """Function tools whose JSON is about `tokens` tokens at CHARS_PER_TOKEN."""
    tools: list[dict[str, Any]] = []
    size = 0
    while size < tokens * CHARS_PER_TOKEN:
        tool = {
            "type": "function",
            "function": {
                "name": f"lookup_{len(tools)}",
                "description": "Look a record up in the inventory by its key " * 4,
                "parameters": {
                    "type": "object",
                    "properties": {"key": {"type": "string"}, "limit": {"type": "integer"}},
                    "required": ["key"],
                },
            },
        }
        tools.append(tool)
        size += len(json.dumps(tool)) + 2
    return tools


def _pairs() -> list[SimPairConfig]:
    return [
        SimPairConfig(name=f"sim-{q}", family="fam", quantization=q, ttft_base_s=TTFT_S,
                      ttft_per_input_token_s=PREFILL_S, tpot_base_s=TPOT_S, max_running=64,
                      context_length=CONTEXT, chars_per_token=CHARS_PER_TOKEN,
                      json_chars_per_token=CHARS_PER_TOKEN, seed=i)
        for i, (q, _) in enumerate(QUANTS)
    ]  # fmt: skip


def _table(urls: dict[str, str]) -> RoutingTable:
    profiled = Profiled(TTFT_S, TPOT_S, ttft_per_input_token_s=PREFILL_S)
    entries = [
        family_entry(q, urls[q], price, profiled) | {"context_length": CONTEXT}
        for q, price in QUANTS
    ]
    return family_table(entries, baselines={"fam": "fam@fp16"})


def _body(
    question: str, tools: list[dict[str, Any]] | None = None, model: str = "auto"
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model, "messages": [{"role": "user", "content": question}],
        "max_tokens": 10, "stream": True, "stream_options": {"include_usage": True},
    }  # fmt: skip
    return body | ({"tools": tools} if tools else {})


async def _ask(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> int:
    try:
        async with session.post(url, json=body) as resp:
            await resp.read()
            return resp.status
    except (aiohttp.ClientError, TimeoutError):
        return -1


@dataclass
class Clients:
    """Closed-loop clients sending `body` until stopped: statuses and latencies (s)."""

    url: str
    body: dict[str, Any]
    statuses: Counter[int]
    latencies: list[float]
    cpu_s: float = 0.0  # this process's CPU over the segments this group led
    segments: list[list[float]] = field(default_factory=list)  # latencies, per segment

    def cpu_ms_per_request(self) -> float:
        return 1000 * self.cpu_s / len(self.latencies) if self.latencies else math.nan

    async def run(self, session: aiohttp.ClientSession, stop: asyncio.Event) -> None:
        while not stop.is_set():
            started = time.monotonic()
            status = await _ask(session, self.url, self.body)
            if not stop.is_set() or status != -1:
                self.statuses[status] += 1
                self.latencies.append(time.monotonic() - started)
                self.segments[-1].append(self.latencies[-1])


async def _for(
    seconds: float, session: aiohttp.ClientSession, *groups: tuple[Clients, int]
) -> None:
    """Each group's clients (that many of them) for `seconds`; every request started is
    answered before this returns. The process's CPU meanwhile goes to the first group."""
    stop = asyncio.Event()
    cpu = time.process_time()
    for clients, _ in groups:
        clients.segments.append([])
    tasks = [asyncio.create_task(c.run(session, stop)) for c, n in groups for _ in range(n)]
    await asyncio.sleep(seconds)
    stop.set()
    await asyncio.gather(*tasks)
    groups[0][0].cpu_s += time.process_time() - cpu


def _sample(app: web.Application, name: str, **labels: str) -> float:
    total = 0.0
    for metric in app[METRICS].registry.collect():
        for s in metric.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total


def _openings(app: web.Application) -> dict[str, int]:
    return {
        f"fam@{q}#0": int(
            _sample(app, "gearbox_circuit_transitions_total", endpoint=f"fam@{q}#0", to="open")
        )
        for q, _ in QUANTS
    }


async def _tools_segments(
    url: str, session: aiohttp.ClientSession, seconds: float
) -> tuple[Clients, Clients, Clients]:
    """The ordinary clients through alternating segments without and with the tools-heavy
    clients (each segment ends once its requests are answered), after one segment of the
    heavy clients alone."""
    clean = Clients(url, _body("What is 2 + 2?", model=PINNED), Counter(), [])
    ordinary = Clients(url, _body("What is 2 + 2?", model=PINNED), Counter(), [])
    tools = Clients(url, _body("Which item is low?", tools_list(TOOLS_TOKENS)), Counter(), [])
    await _for(TOOLS_SEGMENT_S, session, (tools, HEAVY))
    for _ in range(max(1, round(seconds / TOOLS_SEGMENT_S))):
        await _for(TOOLS_SEGMENT_S, session, (clean, ORDINARY))
        await _for(TOOLS_SEGMENT_S, session, (ordinary, ORDINARY), (tools, HEAVY))
    return clean, ordinary, tools


async def run_tools(seconds: float) -> ToolsRow:
    timeout = aiohttp.ClientTimeout(total=60)
    async with run_fleet(SimFleetConfig(pairs=_pairs()), answers={}) as fleet:
        table = _table({q: fleet.url(f"sim-{q}") for q, _ in QUANTS})
        with tempfile.TemporaryDirectory(prefix="gearbox-tools-") as tmp:
            plane = static_data_plane(table, Path(tmp), "bench-tools")
            async with plane as (url, app), aiohttp.ClientSession(timeout=timeout) as session:
                clean, ordinary, tools = await _tools_segments(url, session, seconds)
    ratio = "gearbox_prompt_estimate_ratio"
    n = _sample(app, f"{ratio}_count")
    estimate = _sample(app, f"{ratio}_sum") / n if n else float("nan")
    body = tools.body
    prompt = len(json.dumps(body["tools"])) + len(body["messages"][0]["content"])
    return ToolsRow(
        heavy=dict(tools.statuses), prompt_tokens=round(prompt / CHARS_PER_TOKEN),
        openings=_openings(app), estimate_ratio=estimate, estimate_n=int(n),
        p99_ms_without=p99_ms(clean.latencies), p99_ms_with=p99_ms(ordinary.latencies),
        ordinary=dict(clean.statuses + ordinary.statuses),
        cpu_ms_without=clean.cpu_ms_per_request(), cpu_ms_with=ordinary.cpu_ms_per_request(),
        pooled_without=pooled(clean.segments), pooled_with=pooled(ordinary.segments),
        paired=paired(clean.segments, ordinary.segments),
    )  # fmt: skip


async def _page_segments(url: str, control: PageControl, seconds: float) -> tuple[Clients, Clients]:
    """The ordinary clients through alternating clean and hostile segments."""
    clean = Clients(url, _body("What is 2 + 2?"), Counter(), [])
    hostile = Clients(url, _body("What is 2 + 2?"), Counter(), [])
    for _ in range(round(seconds / SEGMENT_S)):
        for segment, page_bytes in ((clean, 0), (hostile, PAGE_BYTES)):
            await control.serve(page_bytes)
            await _for(SEGMENT_S, control.session, (segment, ORDINARY))
    return clean, hostile


async def run_page(seconds: float) -> PageRow:
    timeout = aiohttp.ClientTimeout(total=30)
    async with run_fleet(SimFleetConfig(pairs=_pairs()), answers={}) as fleet:
        with (
            tempfile.TemporaryDirectory(prefix="gearbox-page-") as tmp,
            page_engine(fleet.url("sim-int4"), Path(tmp)) as engine_url,
        ):
            table = _table({"int4": engine_url, "fp16": fleet.url("sim-fp16")})
            plane = static_data_plane(table, Path(tmp), "bench-page", scrape=ScrapeSettings())
            async with plane as (url, app), aiohttp.ClientSession(timeout=timeout) as session:
                control = PageControl(engine_url, session)
                clean, hostile = await _page_segments(url, control, seconds)
                errors = int(_sample(app, "gearbox_engine_scrape_errors_total"))
                most = await control.most_written()
    statuses = clean.statuses + hostile.statuses
    return PageRow(
        page_bytes=PAGE_BYTES, p99_ms_clean=p99_ms(clean.latencies),
        p99_ms_page=p99_ms(hostile.latencies),
        requests=(len(clean.latencies), len(hostile.latencies)),
        non_200=sum(n for s, n in statuses.items() if s != 200), scrape_errors=errors,
        pages_left_at_mib=most / MiB, cpu_ms_clean=clean.cpu_ms_per_request(),
        cpu_ms_page=hostile.cpu_ms_per_request(), pooled_clean=pooled(clean.segments),
        pooled_page=pooled(hostile.segments), paired=paired(clean.segments, hostile.segments),
    )  # fmt: skip


async def _measure(seconds: float) -> EngineRows:
    return EngineRows(seconds, await run_tools(seconds), await run_page(seconds))


def run_engine_rows(quick: bool) -> EngineRows:
    return asyncio.run(_measure(8.0 if quick else 20.0))
