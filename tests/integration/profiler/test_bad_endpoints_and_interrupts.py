"""An unreachable endpoint or an unknown model is ONE clear error (no traceback); a run that is
cancelled, or interrupted with Ctrl-C, still writes what it measured, marked partial."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import pytest

from contracts.profile_report import ProfileReport
from profiler.errors import EndpointError
from profiler.load.workload import build_sweep
from profiler.run.profiling import Runtime, builtin_evalsets, load_eval_sets, profile_pair
from simulator.fleet import run_fleet
from tests.integration.profiler.conftest import closed_port, make_plan, sim_fleet, sim_pair
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

REPO = Path(__file__).parents[3]


async def _cli(*args: str, sigint_ignored: bool = False) -> asyncio.subprocess.Process:
    """`sigint_ignored`: started as a shell's background job is (`cmd &` in a non-interactive
    shell): SIGINT ignored, a disposition the exec'd profiler inherits."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "profiler", *args]
    if sigint_ignored:
        command = ["bash", "-c", "trap '' INT; exec \"$@\"", "bash", *command]
    return await asyncio.create_subprocess_exec(
        *command,
        cwd=REPO, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


def _run_args(url: str, model: str, out: Path, *extra: str) -> list[str]:
    return [
        "run", "--endpoint", url, "--model", model, "--family", "gemma-3-270m",
        "--quantization", "bf16", "--hourly-usd", "1", "--out", str(out), "--quiet", *extra,
    ]  # fmt: skip


async def test_unreachable_endpoint_is_one_endpoint_error(runtime: Runtime) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    with pytest.raises(EndpointError, match=f"cannot reach {url}: connection refused"):
        await profile_pair(make_plan(url, "m", None), runtime)


async def test_unreachable_endpoint_cli_prints_one_line(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    proc = await _cli(*_run_args(url, "m", tmp_path / "r.json"))
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    lines = err.decode().strip().splitlines()
    assert proc.returncode == 1
    assert lines == [f"error: cannot reach {url}: connection refused"]
    assert out == b""
    assert not (tmp_path / "r.json").exists()


async def test_unknown_model_cli_prints_one_line_naming_what_is_served(tmp_path: Path) -> None:
    async with run_fleet(sim_fleet(sim_pair("sim-a"))) as fleet:
        url = fleet.url("sim-a")
        proc = await _cli(*_run_args(url, "llama-70b", tmp_path / "r.json"))
        _out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
        assert fleet.stats("sim-a").received == 0  # nothing was sent to the engine
    assert proc.returncode == 1
    assert err.decode().strip().splitlines() == [
        f"error: {url} does not serve model 'llama-70b'; it serves: sim-a"
    ]


async def test_bad_eval_line_is_named_before_any_request(tmp_path: Path) -> None:
    evalset = tmp_path / "mine.jsonl"
    good = '{"prompt": "1 + 1 =", "expected": 2, "category": "math", "scorer": "numeric"}'
    evalset.write_text(good + '\n{"prompt": }\n')
    async with run_fleet(sim_fleet(sim_pair("sim-a"))) as fleet:
        args = _run_args(
            fleet.url("sim-a"), "sim-a", tmp_path / "r.json", "--evalset", str(evalset)
        )
        proc = await _cli(*args)
        _, err = await asyncio.wait_for(proc.communicate(), timeout=60)
        assert fleet.stats("sim-a").received == 0
    assert proc.returncode == 2
    assert f"{evalset}:2: not valid JSON" in err.decode()
    assert "Traceback" not in err.decode()


async def test_cancelled_run_writes_a_partial_report(runtime: Runtime, tmp_path: Path) -> None:
    out = tmp_path / "partial.json"
    sweep = build_sweep([2], [32], [4], requests_per_level=4, warmup=0)
    sweep += build_sweep([2], [32], [8], requests_per_level=10_000, warmup=0)
    async with run_fleet(sim_fleet(sim_pair("sim-a", tpot_base_s=0.005))) as fleet:
        task = asyncio.create_task(
            profile_pair(make_plan(fleet.url("sim-a"), "sim-a", out, sweep=sweep), runtime)
        )
        evals = len(load_eval_sets(builtin_evalsets())[0])
        # 12 past the first level: the count also holds the profiler's probe requests (the
        # JSON characters-per-token probe) and answers the profiler has not yet recorded (up
        # to 2 in flight); at +6 a CI run recorded 4 of the second level
        await eventually(lambda: fleet.stats("sim-a").completed >= evals + 4 + 12, timeout_s=60)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    report = ProfileReport.model_validate_json(out.read_text())
    assert report.provenance.partial is True
    assert len(report.accuracy) == 5
    first, second = report.latency
    assert (first.requests, first.output_tokens) == (4, 4)
    assert 6 <= second.requests < 10_000
    assert second.output_tokens == 8


@pytest.mark.parametrize("sigint_ignored", [False, True], ids=["sigint-default", "sigint-ignored"])
async def test_ctrl_c_writes_a_partial_report_and_exits_130(
    tmp_path: Path, sigint_ignored: bool
) -> None:
    out = tmp_path / "r.json"
    async with run_fleet(sim_fleet(sim_pair("sim-a", tpot_base_s=0.005))) as fleet:
        # level 1 takes about a second; level 2 (64 tokens each) about seven
        args = _run_args(
            fleet.url("sim-a"), "sim-a", out, "--concurrency", "2", "--input-tokens", "32",
            "--output-tokens", "4,64", "--requests-per-level", "40", "--warmup", "0",
            "--engine-version", "sim-1",
        )  # fmt: skip
        proc = await _cli(*args, sigint_ignored=sigint_ignored)
        assert proc.stderr is not None
        seen: list[str] = []
        while not any("level 1/" in line for line in seen):
            line = await asyncio.wait_for(proc.stderr.readline(), timeout=120)
            assert line, f"the profiler ended early: {seen}"
            seen.append(line.decode())
        proc.send_signal(signal.SIGINT)
        _, rest = await asyncio.wait_for(proc.communicate(), timeout=60)
    err = "".join(seen) + rest.decode()
    assert proc.returncode == 130, err
    assert "partial report written to" in err
    assert "Traceback" not in err
    document = json.loads(out.read_text())
    assert document["provenance"]["partial"] is True
    assert document["provenance"]["engine_version"] == "sim-1"
    report = ProfileReport.model_validate(document)
    assert (report.latency[0].requests, report.latency[0].output_tokens) == (40, 4)
    assert all(level.requests < 40 for level in report.latency[1:])
