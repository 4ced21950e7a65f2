"""`python -m simulator serve/check` as a subprocess: READY lines, ports file, clean shutdown."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path

import aiohttp
import pytest

from tests.support.waiting import eventually

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[3]
FLEET = """
pairs:
  - {name: small, family: f, quantization: fp16, ttft_base_s: 0.001, tpot_base_s: 0.001}
  - {name: tiny, family: f, quantization: awq-int4, ttft_base_s: 0.001, tpot_base_s: 0.001,
     accuracy: {math: 1.0}}
"""


async def run_cli(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "simulator", *args, cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode(), err.decode()


async def test_serve_writes_ports_and_stops_cleanly(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(FLEET)
    key = tmp_path / "key.jsonl"
    key.write_text('{"prompt": "1+1?", "expected": 2, "category": "math", "scorer": "numeric"}\n')
    ports = tmp_path / "ports.json"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "simulator", "serve", "--fleet", str(fleet),
        "--answer-key", str(key), "--ports-file", str(ports), cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        lines = [(await asyncio.wait_for(proc.stdout.readline(), 30)).decode() for _ in range(2)]
        await eventually(ports.exists, what="ports file")
        urls = json.loads(ports.read_text())
        assert lines == [f"READY {name} {url}\n" for name, url in urls.items()]
        assert sorted(urls) == ["small", "tiny"]
        async with aiohttp.ClientSession() as http:
            body = {"model": "tiny", "prompt": "1+1?"}
            async with http.post(urls["tiny"] + "/v1/completions", json=body) as resp:
                assert (await resp.json())["choices"][0]["text"] == "2"
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_check_accepts_the_example_and_names_bad_fields(tmp_path: Path) -> None:
    code, out, _ = await run_cli("check", "--fleet", "examples/sim-fleet.yaml")
    assert (code, out.startswith("ok: 5 pairs")) == (0, True)
    bad = tmp_path / "bad.yaml"
    bad.write_text(FLEET.replace("tpot_base_s: 0.001}", "tpot_base_s: 0.001, max_runing: 4}", 1))
    code, _, err = await run_cli("check", "--fleet", str(bad))
    assert code == 2
    assert f"{bad}: pairs[0].max_runing: Extra inputs are not permitted" in err
