"""Smoke tests of the benchmark harness pieces that need nothing beyond loopback."""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from bench.common.backend import CHAT_BODY, SSE_BODY, nginx_conf
from bench.common.minimal_proxy import create_app
from bench.common.stats import quantile, ratio
from bench.overhead.openloop import run_open_loop
from bench.overhead.wrk import lua_script, parse_wrk_output

ServerFactory = Callable[[web.Application], Awaitable[TestServer]]
ClientFactory = Callable[[web.Application], Awaitable[TestClient[web.Request, web.Application]]]


def _backend() -> web.Application:
    """A fake engine: JSON for non-streaming requests, chunked SSE for streaming ones."""

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if body.get("stream"):
            resp = web.StreamResponse()
            resp.content_type = "text/event-stream"
            await resp.prepare(request)
            for chunk in SSE_BODY.split("\n\n")[:-1]:
                await resp.write((chunk + "\n\n").encode())
            await resp.write_eof()
            return resp
        return web.Response(body=CHAT_BODY.encode(), content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


def test_wrk_summary_is_parsed_and_missing_summary_fails() -> None:
    line = (
        'WRK_JSON {"requests":5000,"duration_us":2000000,"bytes":1,"connect":0,"read":1,'
        '"write":0,"status":2,"timeout":0,"p50_us":1500,"p90_us":2000,"p99_us":4000,'
        '"mean_us":1600.5,"max_us":9000}'
    )
    result = parse_wrk_output("Running 2s test\n" + line + "\n", connections=32)
    assert result.requests_per_s == pytest.approx(2500.0)
    assert result.p50_ms == pytest.approx(1.5)
    assert result.p99_ms == pytest.approx(4.0)
    assert result.errors == 3
    with pytest.raises(ValueError, match="no summary"):
        parse_wrk_output("Running 2s test\n", connections=1)


def test_lua_script_carries_body_and_headers_verbatim() -> None:
    body = b'{"model":"auto","messages":[{"role":"user","content":"a ]] b"}]}'
    script = lua_script(body, {"X-Min-Accuracy": "0.7"}, "/v1/chat/completions")
    assert '[=[{"model":"auto"' in script  # a long-string level that survives "]]"
    assert 'wrk.headers["X-Min-Accuracy"] = "0.7"' in script
    assert 'wrk.method = "POST"' in script


def test_nginx_config_serves_both_bodies_on_every_port(tmp_path: Path) -> None:
    conf = nginx_conf(tmp_path, (9001, 9002), (9101,))
    for port in (9001, 9002, 9101):
        assert f"listen 127.0.0.1:{port}" in conf
    assert "text/event-stream" in conf
    assert '"chatcmpl-bench"' in conf
    assert json.loads(CHAT_BODY)["object"] == "chat.completion"
    assert SSE_BODY.endswith("data: [DONE]\n\n")


@pytest.mark.parametrize("stream", [False, True])
async def test_open_loop_generator_reads_json_and_chunked_answers(
    aiohttp_server: ServerFactory, stream: bool
) -> None:
    server = await aiohttp_server(_backend())
    url = f"http://127.0.0.1:{server.port}/v1/chat/completions"
    body = json.dumps({"model": "m", "stream": stream}).encode()
    result = await run_open_loop(
        url, body, {"X-A": "1"}, rate_rps=200, duration_s=0.5, warmup_s=0.1
    )
    assert result.sent == 100
    assert result.completed == result.sent
    assert result.errors == 0
    assert 0 < result.p50_ms <= result.p99_ms <= result.max_ms


async def test_open_loop_counts_refused_connections_as_errors() -> None:
    from bench.common.processes import free_port

    url = f"http://127.0.0.1:{free_port()}/v1/chat/completions"  # nothing listens there
    result = await run_open_loop(url, b"{}", {}, rate_rps=100, duration_s=0.2, warmup_s=0.0)
    assert result.sent == 20
    assert result.completed == 0
    assert result.errors == 20
    assert math.isnan(result.p50_ms)


@pytest.mark.parametrize("stream", [False, True])
async def test_minimal_proxy_relays_the_backend_answer(
    aiohttp_server: ServerFactory, aiohttp_client: ClientFactory, stream: bool
) -> None:
    upstream = await aiohttp_server(_backend())
    client = await aiohttp_client(create_app(f"http://127.0.0.1:{upstream.port}"))
    resp = await client.post("/v1/chat/completions", json={"model": "m", "stream": stream})
    assert resp.status == 200
    data = await resp.read()
    if stream:
        assert resp.content_type == "text/event-stream"
        assert data.decode() == SSE_BODY
    else:
        assert json.loads(data) == json.loads(CHAT_BODY)


def test_quantile_and_ratio() -> None:
    values = [float(v) for v in range(1, 101)]
    assert quantile(values, 0.5) == 50.0
    assert quantile(values, 0.99) == 99.0
    assert quantile(values, 1.0) == 100.0
    assert math.isnan(quantile([], 0.5))
    with pytest.raises(ValueError, match="outside"):
        quantile(values, 1.5)
    assert ratio(3.0, 4.0) == 0.75
    assert math.isnan(ratio(1.0, 0.0))


async def test_replay_lag_watch_records_wakeups_until_stopped() -> None:
    import asyncio

    from bench.quality.replay import watch_lag

    stop = asyncio.Event()
    lags: list[float] = []
    task = asyncio.create_task(watch_lag(stop, lags, tick_s=0.005))
    await asyncio.sleep(0.05)
    stop.set()
    await task
    assert len(lags) >= 2
    assert all(lag > -0.005 for lag in lags)  # never wakes meaningfully early
