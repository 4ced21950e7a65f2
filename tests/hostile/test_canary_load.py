"""Canary items are the router's own load (docs/accuracy.md "Canary items"): they never change
how long a client waits on a hung engine.

A simulated engine shaped like `make demo`'s CPU engines (one request at a time, TTFT 0.3 s
plus 0.3 s per request ahead of it, 50 ms a token), alone in its table, behind a data plane
with Redis (canary items are sent only where their counts go out with the feedback) and the
canary items at their defaults. A TCP proxy in front of the engine can freeze it: from then on
nothing is forwarded and nothing answers, `/metrics` included (a SIGSTOPped engine, as in
`tests/integration/data_plane/test_real_prefill.py`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from data_plane.app import HEALTH, AppDeps, create_app
from data_plane.settings import DataPlaneSettings
from simulator import Fleet, SimFleetConfig, SimPairConfig, run_fleet
from tests.reliability.stack import metric
from tests.support.redis_server import running_redis
from tests.support.routing_tables import entry, table
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

PAIR, ENDPOINT, SERVED = "fam@bf16", "fam@bf16#0", "cpu-engine"
# The engine as profiled: a CPU engine that serves one request at a time.
TTFT_S, TTFT_PER_TOKEN_S, TPOT_S = 0.3, 0.002, 0.05
OUTCOMES = ("right", "wrong", "error", "over_budget")
CATEGORIES = ("chat", "extraction", "code", "math", "reasoning")


class FreezableProxy:
    """Forwards TCP connections to `port` until `freeze()`; then it forwards nothing more and
    answers no connection, old or new (the process is stopped). Counts the requests that
    reached it frozen."""

    def __init__(self, port: int) -> None:
        self._port = port
        self._frozen = False
        self._writers: list[asyncio.StreamWriter] = []
        self._pipes: set[asyncio.Task[None]] = set()
        self.held = 0  # requests (their first bytes) that arrived after the freeze

    def freeze(self) -> None:
        self._frozen = True

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        while data := await src.read(65536):
            if self._frozen:
                self.held += data.count(b"POST ")
                continue  # read and dropped: a stopped process answers nothing
            dst.write(data)
            await dst.drain()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.append(writer)
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._port)
        self._writers.append(up_writer)
        for pipe in (self._pipe(reader, up_writer), self._pipe(up_reader, writer)):
            task = asyncio.create_task(pipe)
            self._pipes.add(task)
            task.add_done_callback(self._pipes.discard)

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[str]:
        server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        try:
            yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        finally:
            for task in list(self._pipes):
                task.cancel()
            await asyncio.gather(*self._pipes, return_exceptions=True)
            for writer in self._writers:
                writer.close()
            server.close()
            await server.wait_closed()


@dataclass(frozen=True, slots=True)
class Plane:
    url: str
    app: web.Application
    proxy: FreezableProxy
    fleet: Fleet


@asynccontextmanager
async def cpu_engine_plane(
    tmp_path: Path, sustained_tokens_per_s: float, scrape_interval_s: float = 0.0
) -> AsyncIterator[Plane]:
    """The CPU-shaped engine behind a freezable proxy, and a data plane routing to it; the
    table says the engine sustains `sustained_tokens_per_s` output tokens a second; the
    engine's queue is scraped every `scrape_interval_s` (0: not scraped)."""
    engine = SimPairConfig(
        name=SERVED, family="fam", quantization="bf16", max_running=1, ttft_base_s=TTFT_S,
        ttft_per_input_token_s=TTFT_PER_TOKEN_S, tpot_base_s=TPOT_S,
    )  # fmt: skip
    async with run_fleet(SimFleetConfig(pairs=[engine]), answers={}) as fleet:
        proxy = FreezableProxy(int(fleet.url(SERVED).rsplit(":", 1)[1]))
        async with proxy.serving() as url:
            row = entry(
                "fam", "bf16", urls=[url], served_model_name=SERVED, ttft_base_s=TTFT_S,
                ttft_per_input_token_s=TTFT_PER_TOKEN_S, ttft_per_load_s=TTFT_S,
                tpot_base_s=TPOT_S, tpot_per_load_s=0.0,
            )  # fmt: skip
            row["sustained_output_tokens_per_s"] = sustained_tokens_per_s
            snapshot = tmp_path / "table.json"
            snapshot.write_text(table([row], version=1).model_dump_json())
            with running_redis() as redis:
                values: dict[str, Any] = {
                    "host": "127.0.0.1",
                    "redis_url": redis.url,
                    "snapshot_path": snapshot,
                    "scrape_interval_s": scrape_interval_s,
                    "instance_id": "canary-load-dp",
                }
                app = create_app(DataPlaneSettings(**values), AppDeps())
                server = TestServer(app, host="127.0.0.1")
                await server.start_server()
                try:
                    yield Plane(str(server.make_url("")).rstrip("/"), app, proxy, fleet)
                finally:
                    await server.close()


def canaries(app: web.Application, *outcomes: str) -> float:
    return sum(
        metric(app, "gearbox_canary_items_total", pair=PAIR, category=c, outcome=o)
        for c in CATEGORIES
        for o in outcomes or OUTCOMES
    )


async def _ordinary_stream(
    session: aiohttp.ClientSession, url: str, budget_ms: int | None = None
) -> tuple[int, bytes, float]:
    """An ordinary streamed prompt, without a budget (its deadline: 300 s) unless one is
    given: status, body and the seconds it took."""
    body = {"model": "auto", "prompt": "One, two, three, four,", "max_tokens": 4, "stream": True}
    headers = {} if budget_ms is None else {"X-Latency-Budget-Ms": str(budget_ms)}
    loop = asyncio.get_running_loop()
    started = loop.time()
    post = session.post(f"{url}/v1/completions", data=json.dumps(body), headers=headers)
    async with post as resp:
        raw = await resp.read()
        return resp.status, raw, loop.time() - started


async def test_a_stopped_engine_releases_its_client_at_the_hang_with_canary_items_in_flight(
    tmp_path: Path,
) -> None:
    """Issue 36: with canary items on, a SIGSTOPped real engine's client got its 504 after
    27.1 s instead of 4.6 s. Reproduced here: the canary items (default rate, 4 a second, at
    most 4 in flight) keep the one-slot engine busy; it stops; canary items wait at it. On
    cfcc038 they counted as load at the endpoint, so the client's allowance was priced at
    load 5 (0.3 + 5 x 0.3 s, x 3: 5.4 s), and their own allowances, whole non-streamed
    answers at that load, widened the stall window and the counters' span: 504 after 25-26
    s. Canary items are now counted in no load and watched by no stall rule (each gives up
    at its own allowance, no blame), so the client's attempt is judged as if alone: an
    allowance of (0.3 + 0.3) x 3 = 1.8 s, then 3 windows of 1.8 s of silence, or 3 unanswered
    reads of `/metrics` a window apart: its 504 after about 7.3 s, as with canary items off."""
    async with (
        cpu_engine_plane(tmp_path, 1000.0) as plane,  # the capacity share lets 150 a minute by
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session,
    ):
        url, app, proxy = plane.url, plane.app, plane.proxy
        await eventually(lambda: canaries(app, "right", "wrong") >= 2, timeout_s=30.0,
                         what="canary items answered")  # fmt: skip
        errors = canaries(app, "error")
        proxy.freeze()  # canary items wait at it (4 in flight: the one slot and its queue)
        status, raw, waited_s = await _ordinary_stream(session, url)
        assert status == 504, raw[:300]
        assert b"progress" in raw, raw[:300]
        # the hang for this request alone (about 7.3 s; 25-26 s on cfcc038), not its 300 s
        # deadline; room to spare for a loaded machine
        assert waited_s < 15.0, waited_s
        assert metric(app, "gearbox_circuit_transitions_total", endpoint=ENDPOINT, to="open") == 1
        # canary items were waiting at the stopped engine, and got no answer
        await eventually(lambda: canaries(app, "error") > errors, timeout_s=30.0,
                         what="canary items given up")  # fmt: skip


async def test_canary_items_in_a_stopped_engines_scraped_queue_do_not_make_it_look_full(
    tmp_path: Path,
) -> None:
    """The same engine, its queue scraped every second as a data plane does by default, and a
    client whose budget (1 s) the engine meets with nothing ahead of it but not with one more
    (sustainable concurrency 1). Measured on a real SIGSTOPped vLLM engine (`python -m
    bench.hostile.real_stop --canary-share 1`) on 44a6f81: the client got 429 after 30.0 s,
    twice, against 504 after 4.8 s with canary items off. The last scrape before the stop
    counted the items waiting at the engine as other clients' load (a scrape subtracts only
    this process's client attempts), and a failed scrape keeps the last count: the engine
    looked full, the request waited in the flow-control queue for a slot and was refused
    (429) without ever being tried, so no stall was seen and no breaker opened. Canary items
    at an engine are now subtracted from its scraped queue as this process's own: its load
    stays 0, and the client's request is tried there (504: its budget ran out at the stopped
    engine, not 429 from the queue)."""
    async with (
        cpu_engine_plane(tmp_path, 1000.0, scrape_interval_s=1.0) as plane,
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session,
    ):
        url, app, proxy = plane.url, plane.app, plane.proxy
        tracker = app[HEALTH].tracker
        await eventually(lambda: (tracker.queue_depth(ENDPOINT) or 0.0) >= 2, timeout_s=30.0,
                         what="a scrape counting canary items at the engine")  # fmt: skip
        proxy.freeze()  # that count stays: scrapes of a stopped engine fail
        assert tracker.load.get(ENDPOINT, 0.0) == 0.0, dict(tracker.load)
        status, raw, _ = await _ordinary_stream(session, url, budget_ms=1000)
        assert status == 504, raw[:300]  # tried at the engine; before: 429, "... is full"
        assert b"full" not in raw, raw[:300]


async def test_canary_items_on_a_small_pair_leave_its_clients_the_engine(tmp_path: Path) -> None:
    """The same one-slot engine, profiled at 20 output tokens a second (a CPU engine of `make
    demo`), and one client asking it 20 questions in turn. At the default 240 items a minute
    (cfcc038) the items, 0.7 s of engine time each, kept the engine busy: nearly every client
    request found one there and queued behind it. Bounded by 2% of the pair's capacity, an
    item's 8 tokens come once every 20 s: the client's requests share the engine with at most
    the items sent meanwhile (counts, not times: the engine's own count of requests in
    flight, beside each client request)."""
    async with (
        cpu_engine_plane(tmp_path, 20.0) as plane,
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session,
    ):
        app = plane.app
        await eventually(lambda: canaries(app) >= 1, timeout_s=30.0, what="the first item")
        before, shared = canaries(app), 0
        loop = asyncio.get_running_loop()
        started = loop.time()
        body = {"model": "auto", "prompt": "Say hello.", "max_tokens": 4}
        for _ in range(20):
            plane.fleet.reset(SERVED)
            async with session.post(f"{plane.url}/v1/completions", json=body) as resp:
                assert resp.status == 200, await resp.text()
            shared += plane.fleet.stats(SERVED).peak_in_flight > 1
        sent = canaries(app) - before
        # one slot every 20 s (items answered meanwhile; cfcc038: about 1.4 a second)
        assert sent <= 1 + (loop.time() - started) / 20.0, sent
        assert shared <= sent + 1, (shared, sent)  # +1: one in flight at the start
