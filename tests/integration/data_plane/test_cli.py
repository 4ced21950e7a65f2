"""`python -m data_plane serve` as a real process: static mode from a snapshot file."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tests.component.data_plane.fakes import two_pair_table
from tests.support.redis_server import free_port
from tests.support.waiting import until_ready

pytestmark = pytest.mark.integration


async def test_serve_command_runs_from_a_snapshot(tmp_path: Path) -> None:
    snapshot = tmp_path / "table.json"
    snapshot.write_text(two_pair_table(version=9).model_dump_json(), encoding="utf-8")
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "data_plane",
        "serve",
        "--server-host",
        "127.0.0.1",
        "--server-port",
        str(port),
        "--redis-url",
        "",
        "--table-snapshot-path",
        str(snapshot),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with aiohttp.ClientSession() as session:
            await until_ready(session, f"http://127.0.0.1:{port}", 9)
            async with session.get(f"http://127.0.0.1:{port}/v1/models") as resp:
                assert "fam@int4" in {m["id"] for m in (await resp.json())["data"]}
    finally:
        proc.terminate()
        _, stderr = await asyncio.wait_for(proc.communicate(), timeout=30)
    lines = [json.loads(line) for line in stderr.decode().splitlines() if line.startswith("{")]
    messages = [line["message"] for line in lines]
    assert any("routing table v9 from snapshot" in m for m in messages)
    assert all({"ts", "level", "logger", "message"} <= set(line) for line in lines)


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
async def test_served_process_proxies_to_an_engine(
    tmp_path: Path, aiohttp_server: Any, loop: str
) -> None:
    """The real process (its event loop and engine client) relays answers and streams."""

    async def engine(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if not body.get("stream"):
            return web.json_response({"served_by": body["model"], "choices": []})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(3):
            await resp.write(f"data: {i}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", engine)
    server = await aiohttp_server(app)
    base = str(server.make_url("")).rstrip("/")
    snapshot = tmp_path / "table.json"
    snapshot.write_text(two_pair_table([base], [base]).model_dump_json(), encoding="utf-8")
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "data_plane", "serve", "--server-host", "127.0.0.1"),
        *("--server-port", str(port), "--redis-url", "", "--table-snapshot-path", str(snapshot)),
        *("--event-loop", loop),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    chat = {"model": "auto", "messages": [{"role": "user", "content": "hi"}]}
    try:
        async with aiohttp.ClientSession() as session:
            await until_ready(session, f"http://127.0.0.1:{port}")
            for _ in range(3):  # new, then kept-alive engine connections
                async with session.post(url, json=chat) as resp:
                    assert resp.status == 200
                    assert (await resp.json())["served_by"] == "served-fam-int4"
                    assert resp.headers["X-Route-Pair"] == "fam@int4"
            async with session.post(url, json={**chat, "stream": True}) as resp:
                assert resp.status == 200
                assert await resp.read() == b"data: 0\n\ndata: 1\n\ndata: 2\n\ndata: [DONE]\n\n"
    finally:
        proc.terminate()
        _, stderr = await asyncio.wait_for(proc.communicate(), timeout=30)
    errors = [line for line in stderr.decode().splitlines() if '"level": "ERROR"' in line]
    assert errors == []
