"""The data plane never tells a client where its engines or its Redis live, and never calls
anything but the endpoints of the published table, whatever the request says."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from contracts.redis_keys import RedisKeys
from control_plane.store.publisher import Publisher
from simulator import FaultConfig, Fleet, SimFleetConfig, run_fleet
from tests.reliability.conftest import LiveDataPlane, ServerFactory, StartDataPlane
from tests.reliability.stack import (
    CHEAP,
    PRICEY,
    chat_body,
    dp_settings,
    fleet_table,
    served_name,
    sim_pair,
)
from tests.support.redis_server import RedisProcess
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration


@pytest.fixture
async def fleet() -> AsyncIterator[Fleet]:
    config = SimFleetConfig(pairs=[sim_pair(CHEAP), sim_pair(PRICEY)])
    async with run_fleet(config, answers={}) as running:
        yield running


@pytest.fixture
async def plane(
    fleet: Fleet,
    publisher: Publisher,
    redis_server: RedisProcess,
    redis_keys: RedisKeys,
    snapshot: Path,
    start_data_plane: StartDataPlane,
) -> LiveDataPlane:
    urls = {q: [fleet.url(served_name(q))] for q in (CHEAP, PRICEY)}
    published = await publisher.publish(fleet_table(urls))
    settings = dp_settings(redis_server.url, redis_keys.prefix, snapshot, deadline_grace_s=0.1)
    live = await start_data_plane(settings)
    await eventually(lambda: live.version == published.version, what="table loaded")
    return live


class Recorder:
    """Everything a client saw: status lines, headers and bodies, as text."""

    def __init__(self, session: aiohttp.ClientSession, url: str) -> None:
        self.session = session
        self.url = url
        self.seen: list[str] = []

    async def send(self, method: str, path: str, **kw: Any) -> int:
        async with self.session.request(method, self.url + path, **kw) as resp:
            body = await resp.read()
            self.seen += [f"{k}: {v}" for k, v in resp.headers.items()]
            self.seen.append(body.decode("utf-8", "replace"))
            return resp.status


def forbidden(fleet: Fleet, redis_url: str) -> list[str]:
    out = []
    for url in (*fleet.urls().values(), redis_url):
        out += [url, url.split("://", 1)[1].split("/", 1)[0].rsplit("@", 1)[-1]]
    return out


async def test_no_answer_reveals_engine_or_redis_addresses(
    fleet: Fleet, plane: LiveDataPlane, redis_server: RedisProcess
) -> None:
    chat = "/v1/chat/completions"
    budget = {"X-Latency-Budget-Ms": "300"}
    async with aiohttp.ClientSession() as session:
        rec = Recorder(session, plane.url)
        statuses = [
            await rec.send("POST", chat, json=chat_body()),
            await rec.send("POST", chat, json=chat_body(stream=True)),
            await rec.send("POST", "/v1/completions", json={"model": "auto", "prompt": "hi"}),
            await rec.send("POST", "/v1/route", json=chat_body()),
            await rec.send("GET", "/v1/models"),
            await rec.send("GET", "/readyz"),
            await rec.send("GET", "/healthz"),
            await rec.send("GET", "/metrics"),
            await rec.send("POST", chat, json=chat_body(model="nope")),
            await rec.send("POST", chat, data=b"{broken"),
            await rec.send("POST", chat, json=chat_body(max_tokens=10**6)),  # engine 400
            await rec.send("GET", "/v1/nothing-here"),
        ]
        assert statuses == [200, 200, 200, 200, 200, 200, 200, 200, 404, 400, 400, 404]

        for q in (CHEAP, PRICEY):  # engines fail with 503, then break streams
            fleet.set_faults(served_name(q), FaultConfig(error_rate=1.0))
        assert await rec.send("POST", chat, json=chat_body()) == 502
        for q in (CHEAP, PRICEY):
            fleet.set_faults(served_name(q), FaultConfig(break_stream_rate=1.0))
        assert await rec.send("POST", chat, json=chat_body(stream=True)) == 200
        for q in (CHEAP, PRICEY):
            fleet.set_faults(served_name(q), FaultConfig(hang_rate=1.0))
        assert await rec.send("POST", chat, json=chat_body(), headers=budget) == 504
        for q in (CHEAP, PRICEY):
            fleet.set_faults(served_name(q), FaultConfig())
            fleet.stop_pair(served_name(q))
        for _ in range(8):  # connection refused, then every breaker open
            assert await rec.send("POST", chat, json=chat_body()) == 503
        assert await rec.send("POST", "/v1/route", json=chat_body()) == 200

    assert any("stream_broken" in text for text in rec.seen)  # the SSE error event was seen
    blob = "\n".join(rec.seen)
    leaked = [s for s in forbidden(fleet, redis_server.url) if s in blob]
    assert leaked == [], f"internal addresses in answers: {leaked}"


@pytest.fixture
async def canary(aiohttp_server: ServerFactory) -> tuple[TestServer, list[str]]:
    """A server nobody should ever call: it records every request it gets."""
    hits: list[str] = []

    async def record(request: web.Request) -> web.Response:
        hits.append(f"{request.method} {request.path_qs}")
        return web.json_response({"choices": [{"message": {"content": "pwned"}}]})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", record)
    server = await aiohttp_server(app, host="127.0.0.1")
    return server, hits


async def raw_post(url: str, target: bytes, body: bytes) -> int:
    """A request with an arbitrary request-target (e.g. absolute-form); returns the status."""
    host, port = url.split("://", 1)[1].split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    head = b"POST " + target + b" HTTP/1.1\r\nHost: " + host.encode() + b"\r\n"
    head += b"Content-Type: application/json\r\nConnection: close\r\n"
    writer.write(head + b"Content-Length: %d\r\n\r\n" % len(body) + body)
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), timeout=10)
    writer.close()
    return int(answer.split(b" ", 2)[1])


async def test_requests_cannot_steer_the_router_to_another_url(
    fleet: Fleet, plane: LiveDataPlane, canary: tuple[TestServer, list[str]]
) -> None:
    server, hits = canary
    evil = str(server.make_url("")).rstrip("/")
    evil_host = evil.split("://", 1)[1]
    models = [
        evil,
        evil + "/v1",
        evil_host,
        "//" + evil_host,
        f"llama-3.1-8b-instruct@fp8#{evil}",
        f"llama-3.1-8b-instruct@../../{evil_host}",
        f"{evil}@fp8",
        "llama-3.1-8b-instruct@fp8/../../x",
    ]
    steering_headers = {
        "Host": evil_host,
        "X-Forwarded-Host": evil_host,
        "X-Forwarded-For": "127.0.0.1",
        "X-Forwarded-Proto": "http",
        "X-Forwarded-Port": evil_host.rsplit(":", 1)[1],
        "Forwarded": f"for=127.0.0.1;host={evil_host};proto=http",
        "X-Original-URL": evil + "/v1/chat/completions",
        "X-Rewrite-URL": evil + "/v1/chat/completions",
    }
    body_fields = {"api_base": evil, "base_url": evil, "endpoint": evil, "url": evil}
    async with aiohttp.ClientSession() as session:
        rec = Recorder(session, plane.url)
        for model in models:
            status = await rec.send("POST", "/v1/chat/completions", json=chat_body(model=model))
            assert status == 404, model
        status = await rec.send(
            "POST", "/v1/chat/completions", json=chat_body(), headers=steering_headers
        )
        assert status == 200
        status = await rec.send("POST", "/v1/chat/completions", json=chat_body() | body_fields)
        assert status == 200
    body = json.dumps(chat_body()).encode()
    for target in (
        evil.encode() + b"/v1/chat/completions",
        b"//" + evil_host.encode() + b"/v1/chat/completions",
        b"/v1/chat/completions/../../" + evil_host.encode(),
    ):
        status = await raw_post(plane.url, target, body)
        assert status in (200, 400, 404), target

    assert hits == []  # the canary was never called
    for q in (CHEAP, PRICEY):  # and the engines only saw the OpenAI path they serve
        last = fleet.last_request(served_name(q))
        assert last is None or last.path == "/v1/chat/completions"
