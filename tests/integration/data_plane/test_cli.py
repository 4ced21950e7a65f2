"""`python -m data_plane serve` as a real process: static mode from a snapshot file."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import aiohttp
import pytest

from tests.component.data_plane.fakes import two_pair_table
from tests.support.redis_server import free_port
from tests.support.waiting import eventually

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
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--redis-url",
        "",
        "--snapshot-path",
        str(snapshot),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with aiohttp.ClientSession() as session:

            async def ready() -> bool:
                try:
                    async with session.get(f"http://127.0.0.1:{port}/readyz") as resp:
                        return resp.status == 200 and (await resp.json())["table_version"] == 9
                except aiohttp.ClientConnectionError:
                    return False

            await eventually(ready, timeout_s=30, interval_s=0.1, what="server ready")
            async with session.get(f"http://127.0.0.1:{port}/v1/models") as resp:
                assert "fam@int4" in {m["id"] for m in (await resp.json())["data"]}
    finally:
        proc.terminate()
        _, stderr = await asyncio.wait_for(proc.communicate(), timeout=30)
    lines = [json.loads(line) for line in stderr.decode().splitlines() if line.startswith("{")]
    messages = [line["message"] for line in lines]
    assert any("routing table v9 from snapshot" in m for m in messages)
    assert all({"ts", "level", "logger", "message"} <= set(line) for line in lines)
