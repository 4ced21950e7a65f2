"""A client that goes away mid-stream or mid-wait is counted as cancelled and frees its place."""

from __future__ import annotations

import asyncio
import json
from urllib.parse import urlsplit

import aiohttp
import pytest

from simulator.config import SimFleetConfig
from simulator.fleet import run_fleet
from tests.integration.simulator.conftest import pair_config
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration
NAME = "sim-model"
LONG = {"model": NAME, "prompt": "x", "max_tokens": 5000, "stream": True}


async def send_raw(base_url: str) -> asyncio.StreamWriter:
    """POST a long completion over a bare socket, so the test controls when it closes."""
    parts = urlsplit(base_url)
    _, writer = await asyncio.open_connection(parts.hostname, parts.port)
    body = json.dumps(LONG).encode()
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: {parts.netloc}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    writer.write(head.encode() + body)
    await writer.drain()
    return writer


async def test_disconnect_mid_stream_and_mid_wait() -> None:
    config = pair_config(NAME, tpot_base_s=0.005, max_running=1, context_length=8192)
    async with (
        run_fleet(SimFleetConfig(pairs=[config])) as fleet,
        aiohttp.ClientSession() as http,
    ):
        url = fleet.url(NAME) + "/v1/completions"
        resp = await http.post(url, json=LONG)
        await resp.content.readuntil(b"\n\n")  # tokens are flowing
        queued = await send_raw(fleet.url(NAME))
        await eventually(lambda: fleet.stats(NAME).waiting == 1, what="second request queued")

        queued.close()  # the waiting client goes away
        await queued.wait_closed()
        await eventually(lambda: fleet.stats(NAME).cancelled == 1, what="waiter cancelled")
        assert (fleet.stats(NAME).waiting, fleet.stats(NAME).running) == (0, 1)

        resp.close()  # drops the streaming request mid-stream
        await eventually(lambda: fleet.stats(NAME).cancelled == 2, what="stream cancelled")
        stats = fleet.stats(NAME)
        assert (stats.running, stats.waiting, stats.completed) == (0, 0, 0)

        body = {"model": NAME, "prompt": "x", "max_tokens": 2}
        async with http.post(url, json=body) as after:
            assert after.status == 200
        assert fleet.stats(NAME).completed == 1
