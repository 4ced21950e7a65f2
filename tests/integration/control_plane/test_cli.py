"""CLI against a real redis-server (publish, show, history, rollback) and the admin API (push)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from pydantic import SecretStr

from contracts.redis_keys import RedisKeys
from control_plane.app import create_app
from control_plane.cli import _parser, cmd_push, run
from control_plane.settings import ControlPlaneSettings, RedisSettings, ServerSettings
from tests.integration.control_plane.conftest import TOKEN
from tests.support.redis_server import RedisProcess, free_port
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration
REPORTS = sorted(str(p) for p in Path("examples/profiles").glob("*.json"))


def test_publish_show_history_rollback(redis_server: RedisProcess, redis_keys: RedisKeys,
                                       capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    where = ["--redis-url", redis_server.url, "--redis-key-prefix", redis_keys.prefix]
    assert run(["show", *where]) == 1
    assert capsys.readouterr().err == "error: no table published yet\n"
    assert run(["publish", *where]) == 1  # nothing stored, no files
    assert "no reports" in capsys.readouterr().err
    assert run(["publish", *REPORTS, "--policy", "examples/policy.yaml", *where]) == 0
    assert capsys.readouterr().out.startswith("published v1 (sha256 ")
    assert run(["publish", *REPORTS, "--policy", "examples/policy.yaml", *where]) == 0
    assert capsys.readouterr().out.startswith("unchanged: v1 is current")
    assert run(["publish", *REPORTS, "--no-prune", *where]) == 0
    assert "published v2" in capsys.readouterr().out
    assert run(["show", *where]) == 0
    assert "routing table v2" in capsys.readouterr().out
    assert run(["show", "--version", "1", "--json", *where]) == 0
    assert '"version": 1' in capsys.readouterr().out
    assert run(["rollback", "1", *where]) == 0
    assert capsys.readouterr().out == "rolled back to v1 (was v2)\n"
    assert run(["history", *where]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("        2")
    assert lines[2].startswith("->      1")
    assert run(["rollback", "9", *where]) == 1
    assert capsys.readouterr().err == "error: version 9 is not among the kept versions\n"
    assert run(["show", "--version", "9", *where]) == 1
    assert "version 9 is not kept" in capsys.readouterr().err


def test_the_old_prefix_flag_still_sets_the_key_prefix_and_names_the_new_one(
    redis_server: RedisProcess, redis_keys: RedisKeys, capsys: pytest.CaptureFixture[str]
) -> None:
    new = ["--redis-url", redis_server.url, "--redis-key-prefix", redis_keys.prefix]
    assert run(["publish", *REPORTS, "--policy", "examples/policy.yaml", *new]) == 0
    assert capsys.readouterr().err == ""
    old = ["--redis-url", redis_server.url, "--prefix", redis_keys.prefix]
    assert run(["show", *old]) == 0  # the table published under the prefix
    captured = capsys.readouterr()
    assert "routing table v1" in captured.out
    assert captured.err == "warning: --prefix is renamed --redis-key-prefix\n"


def test_commands_fail_cleanly_without_redis(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["history", "--redis-url", "redis://127.0.0.1:1/0"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: Redis: ")
    assert err.count("\n") == 1


async def test_push_sends_reports_and_reports_failures(
    aiohttp_server: Any, redis_server: RedisProcess, redis_keys: RedisKeys, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    settings = ControlPlaneSettings(
        redis=RedisSettings(url=redis_server.url, key_prefix=redis_keys.prefix),
        server=ServerSettings(admin_token=SecretStr(TOKEN)),
    )
    server = await aiohttp_server(create_app(settings))
    url = f"http://127.0.0.1:{server.port}"
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    args = _parser().parse_args(["push", REPORTS[0], str(bad), "--url", url, "--token", TOKEN])
    assert await cmd_push(args, settings) == 1
    captured = capsys.readouterr()
    assert captured.out.startswith("pushed llama-3.1-70b-instruct@awq-int4 (new)")
    assert captured.err.startswith(f"error: {bad}: family: Field required")
    wrong = _parser().parse_args(["push", REPORTS[0], "--url", url, "--token", "x" * 20])
    assert await cmd_push(wrong, settings) == 1
    assert "HTTP 401: invalid bearer token" in capsys.readouterr().err


def test_demo_runs_end_to_end() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "demo.control_plane_tour"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "published v1" in done.stdout
    assert "unchanged: v1 stays current" in done.stdout
    assert "current is v1 again (was v2)" in done.stdout
    assert "pruned: llama-3.1-8b-instruct@int8-w8a8" in done.stdout


async def test_serve_runs_the_admin_api(redis_server: RedisProcess, redis_keys: RedisKeys) -> None:
    port = free_port()
    env = {
        **os.environ,
        "GEARBOX_CP_SERVER_ADMIN_TOKEN": TOKEN,
        "GEARBOX_CP_REDIS_URL": redis_server.url,
        "GEARBOX_CP_REDIS_KEY_PREFIX": redis_keys.prefix,
        "GEARBOX_CP_SERVER_PORT": str(port),
        "GEARBOX_CP_POLICY_FILE": "examples/policy.yaml",
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "control_plane", "serve", env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as session:

            async def ready() -> bool:
                # A process that exited (a bad setting, its port taken) fails at once.
                assert proc.returncode is None, f"control_plane serve exited {proc.returncode}"
                try:
                    async with session.get(f"{base}/readyz") as resp:
                        return resp.status == 200
                except aiohttp.ClientError:
                    return False

            # Bounded by the process's own start or exit; 120 s is the safety net for a start
            # (imports, Redis) on a loaded machine, where 60 s ran out.
            await eventually(ready, timeout_s=120, what="the admin API to be ready")
            async with session.get(f"{base}/v1/policy") as resp:
                assert resp.headers["X-Gearbox-Policy-Source"] == "file"
            async with session.post(
                f"{base}/v1/tables", headers={"Authorization": "Bearer x"}
            ) as resp:
                assert resp.status == 401
    finally:
        proc.terminate()
        _, stderr = await asyncio.wait_for(proc.communicate(), timeout=20)
    assert TOKEN.encode() not in stderr
