"""Gateway mode sheds on the engines' scraped load (docs/gateway.md, "Load and shedding"):
`python -m data_plane extproc` as a real process, the table the control plane builds for two
simulated engines, and requests that reach the cheap engine without going through Gearbox (in
a gateway, Envoy and the endpoint picker send them; Gearbox never proxies).

With max_tokens 100 the cheap pair's predicted latency is about 0.62 s + 0.015 s per request
in flight, so an 800 ms budget fits beside at most 11 requests (tests/hostile/test_tenant_burst.py);
the dearer pair misses 800 ms even unloaded. Sixteen long requests held on the cheap engine
show in its `/metrics`, which the gateway scrapes: a sheddable request is then answered 429
with llm-d's dropped reason, a critical one is still routed, and once the engine drains the
same sheddable request is routed again.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest

from data_plane.gateway import protos as ext_proc
from simulator import Fleet, SimFleetConfig, run_fleet
from tests.reliability.stack import CHEAP, PRICEY, fleet_table, pair_of, served_name, sim_pair
from tests.support.extproc_client import ExternalProcessorStub
from tests.support.redis_server import free_port
from tests.support.waiting import eventually, until_ready

pytestmark = pytest.mark.integration

HOLDERS = 16
CHEAP_EP = f"{pair_of(CHEAP)}#0"
SHORT = {
    "model": "auto",
    "max_tokens": 100,
    "messages": [{"role": "user", "content": "Summarise this in one line."}],
}
BUDGET = {"x-latency-budget-ms": "800"}


async def decide(channel: grpc.aio.Channel, headers: Mapping[str, str]) -> Any:
    """One request through ext_proc (full-duplex streamed body): its last response."""
    pairs = [(":path", "/v1/chat/completions"), (":method", "POST"), *headers.items()]
    header_map = ext_proc.HeaderMap(
        headers=[ext_proc.HeaderValue(key=k, raw_value=v.encode()) for k, v in pairs]
    )
    first = ext_proc.ProcessingRequest(request_headers=ext_proc.HttpHeaders(headers=header_map))
    mode = ext_proc.ProcessingMode.FULL_DUPLEX_STREAMED
    first.protocol_config.CopyFrom(ext_proc.ProtocolConfiguration(request_body_mode=mode))
    body = ext_proc.HttpBody(body=json.dumps(SHORT).encode(), end_of_stream=True)
    call = ExternalProcessorStub(channel).Process()
    await call.write(first)
    await call.write(ext_proc.ProcessingRequest(request_body=body))
    answer = await call.read()  # as Envoy does: its side stays open until it is answered
    await call.done_writing()  # (a half-close before that is a client gone: the wait ends)
    while await call.read() is not grpc.aio.EOF:
        pass
    return answer


def routed_pair(response: Any) -> str | None:
    """The pair a routed request was sent to; None for an immediate (error) answer."""
    if response.WhichOneof("response") != "request_headers":
        return None
    mutations = response.request_headers.response.header_mutation.set_headers
    headers: dict[str, str] = {o.header.key: o.header.raw_value.decode() for o in mutations}
    return headers["x-gearbox-pair"]


async def queue_depth(session: aiohttp.ClientSession, http_url: str) -> float:
    """The gateway's scraped queue depth of the cheap engine, from its /metrics."""
    async with session.get(f"{http_url}/metrics") as resp:
        text = await resp.text()
    prefix = f'gearbox_engine_queue_depth{{endpoint="{CHEAP_EP}"}} '
    lines = [x for x in text.splitlines() if x.startswith(prefix)]
    return float(lines[0].split()[-1]) if lines else 0.0


@pytest.fixture
async def fleet() -> AsyncIterator[Fleet]:
    # Holders: about 3 s each (600 tokens at 5 ms).
    config = SimFleetConfig(
        pairs=[sim_pair(CHEAP, tpot_base_s=0.005, default_max_tokens=600), sim_pair(PRICEY)]
    )
    async with run_fleet(config, answers={}) as running:
        yield running


async def hold(session: aiohttp.ClientSession, fleet: Fleet) -> int:
    """One long request straight to the cheap engine (as the endpoint picker would send it)."""
    body = {**SHORT, "model": served_name(CHEAP), "max_tokens": 600}
    async with session.post(f"{fleet.url(served_name(CHEAP))}/v1/chat/completions", json=body) as r:
        await r.read()
        return r.status


async def test_gateway_mode_sheds_on_the_engines_scraped_load(fleet: Fleet, tmp_path: Path) -> None:
    snapshot = tmp_path / "table.json"
    urls = {q: [fleet.url(served_name(q))] for q in (CHEAP, PRICEY)}
    snapshot.write_text(fleet_table(urls).model_dump_json(), encoding="utf-8")
    http_port, grpc_port = free_port(), free_port()
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "data_plane", "extproc", "--server-host", "127.0.0.1"),
        *("--server-port", str(http_port), "--extproc-port", str(grpc_port), "--redis-url", ""),
        *("--table-snapshot-path", str(snapshot), "--scrape-interval-s", "0.1"),
        *("--admission-priority-header-trusted", "true"),  # x-priority: critical below, by right
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    http_url = f"http://127.0.0.1:{http_port}"
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session,
            grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}") as channel,
        ):
            await until_ready(session, http_url, what="extproc ready")
            # Spare capacity: routed to the cheap pair, whatever the class.
            assert routed_pair(await decide(channel, BUDGET)) == pair_of(CHEAP)
            burst = [asyncio.create_task(hold(session, fleet)) for _ in range(HOLDERS)]

            async def scraped_busy() -> bool:
                return await queue_depth(session, http_url) >= HOLDERS

            await eventually(scraped_busy, timeout_s=10, what="the scrape sees the burst")
            # Strict: in best effort the dearer pair, idle though it misses 800 ms even
            # unloaded, would take it late instead of a 429 (tests/component/data_plane/
            # test_flow.py); with it held too, best effort is refused as well.
            shed = await decide(channel, {**BUDGET, "x-budget-mode": "strict"})
            assert shed.WhichOneof("response") == "immediate_response"
            immediate = shed.immediate_response
            assert immediate.status.code == 429
            assert json.loads(immediate.body)["error"]["code"] == "router_overloaded"
            headers = {
                o.header.key: o.header.raw_value.decode() for o in immediate.headers.set_headers
            }
            assert headers["x-llm-d-request-dropped-reason"] == "router_overloaded"
            assert int(headers["retry-after"]) >= 1
            assert headers["x-should-retry"] == "true"
            critical = {**BUDGET, "x-priority": "critical"}
            assert routed_pair(await decide(channel, critical)) is not None
            assert all(status == 200 for status in await asyncio.gather(*burst))

            async def scraped_idle() -> bool:
                return await queue_depth(session, http_url) == 0

            await eventually(scraped_idle, timeout_s=10, what="the scrape sees the drain")
            assert routed_pair(await decide(channel, BUDGET)) == pair_of(CHEAP)
    finally:
        proc.terminate()
        _, stderr = await asyncio.wait_for(proc.communicate(), timeout=30)
    assert proc.returncode == 0, stderr.decode()[-2000:]
