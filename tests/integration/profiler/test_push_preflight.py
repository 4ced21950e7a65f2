"""`--push` is checked before the sweep (issue 13 item 13): a wrong token, an unknown host or
a URL that is not a control plane stops the profiler before any engine request, in words; an
URL ending in /v1 gets a hint. Against the real control plane app on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from pydantic import SecretStr

from control_plane.app import create_app
from control_plane.settings import ControlPlaneSettings, RedisSettings, ServerSettings
from profiler.errors import PushError
from profiler.reports.push import check_push_target
from simulator.fleet import run_fleet
from tests.integration.profiler.conftest import closed_port, sim_fleet, sim_pair

pytestmark = pytest.mark.integration

REPO = Path(__file__).parents[3]
TOKEN = "preflight-admin-token-0123456789"


@contextlib.asynccontextmanager
async def control_plane() -> AsyncIterator[str]:
    """The real admin API; its Redis is never reached by the token check."""
    settings = ControlPlaneSettings(
        redis=RedisSettings(url=f"redis://127.0.0.1:{closed_port()}/0"),
        server=ServerSettings(admin_token=SecretStr(TOKEN)),
    )
    runner = web.AppRunner(create_app(settings), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        host, port = runner.addresses[0][:2]
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


async def profile(engine: str, out: Path, *push: str) -> tuple[int, str]:
    args = [
        "run", "--endpoint", engine, "--model", "sim-a", "--family", "gemma-3-270m",
        "--quantization", "bf16", "--hourly-usd", "1", "--out", str(out), "--quiet",
        "--concurrency", "1", "--input-tokens", "16", "--output-tokens", "4", *push,
    ]  # fmt: skip
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "profiler", *args,
        cwd=REPO, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode is not None
    return proc.returncode, err.decode()


async def test_a_wrong_token_stops_the_profiler_before_the_sweep(tmp_path: Path) -> None:
    async with run_fleet(sim_fleet(sim_pair("sim-a"))) as fleet, control_plane() as cp:
        code, err = await profile(
            fleet.url("sim-a"), tmp_path / "r.json", "--push", cp, "--token", "wrong-token"
        )
        assert fleet.stats("sim-a").received == 0  # nothing was measured
    assert code == 1
    assert "refused the token (HTTP 401" in err, err
    assert "wrong-token" not in err
    assert not (tmp_path / "r.json").exists()


async def test_an_unknown_push_host_is_named_in_words(tmp_path: Path) -> None:
    async with run_fleet(sim_fleet(sim_pair("sim-a"))) as fleet:
        code, err = await profile(
            fleet.url("sim-a"),
            tmp_path / "r.json",
            "--push", "http://no-such-host.invalid:8090", "--token", TOKEN,
        )  # fmt: skip
        assert fleet.stats("sim-a").received == 0
    assert code == 1
    assert "unknown host 'no-such-host.invalid'" in err, err


async def test_a_push_url_ending_in_v1_gets_a_hint(tmp_path: Path) -> None:
    async with run_fleet(sim_fleet(sim_pair("sim-a"))) as fleet, control_plane() as cp:
        code, err = await profile(
            fleet.url("sim-a"), tmp_path / "r.json", "--push", f"{cp}/v1", "--token", TOKEN
        )
        assert fleet.stats("sim-a").received == 0
    assert code == 1
    assert f"without /v1: try {cp}" in err, err


async def test_an_endpoint_ending_in_v1_gets_a_hint(tmp_path: Path) -> None:
    async with run_fleet(sim_fleet(sim_pair("sim-a"))) as fleet:
        url = fleet.url("sim-a")
        code, err = await profile(f"{url}/v1", tmp_path / "r.json")
    assert code == 1
    assert f"--endpoint takes the server's base URL without /v1: try {url}" in err, err


async def test_a_good_token_passes_the_check(tmp_path: Path) -> None:
    async with control_plane() as cp, aiohttp.ClientSession() as session:
        await check_push_target(session, cp, TOKEN)  # no error
        with pytest.raises(PushError, match="HTTP 404"):
            await check_push_target(session, f"{cp}/elsewhere", TOKEN)
