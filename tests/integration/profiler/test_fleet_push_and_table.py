"""Several pairs in one command (fleet file, --parallel), the push to the control plane admin
API, and the control plane's table builder accepting what the profiler wrote."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from contracts.policy import Policy
from contracts.profile_report import ProfileReport
from control_plane.build.table import build_table
from profiler.errors import PushError
from profiler.load.workload import build_sweep
from profiler.reports.push import push_report
from profiler.run.fleet import run_fleet as profile_fleet
from profiler.run.profiling import Runtime, profile_pair
from simulator.config import SimFleetConfig
from simulator.fleet import run_fleet
from tests.integration.profiler.conftest import closed_port, make_plan, sim_pair
from tests.support.loopback import served

pytestmark = pytest.mark.integration

REPO = Path(__file__).parents[3]
TOKEN = "profiler-test-token-0123456789"
EVAL_ROWS = [
    {"prompt": "2 + 2 =", "expected": 4, "category": "math", "scorer": "numeric"},
    {"prompt": "3 + 5 =", "expected": 8, "category": "math", "scorer": "numeric"},
    {"prompt": "The capital of Peru is", "expected": "Lima", "category": "chat",
     "scorer": "contains"},
    {"prompt": "The capital of Chile is", "expected": "Santiago", "category": "chat",
     "scorer": "contains"},
]  # fmt: skip


@dataclass
class ControlPlaneStub:
    """Answers `POST /v1/profiles` like the admin API; records what it was sent."""

    status: int = 201
    received: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    async def check(self, request: web.Request) -> web.Response:
        """`POST /v1/auth/check`, which the profiler asks before measuring."""
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return web.json_response({"error": {"message": "invalid token"}}, status=401)
        return web.json_response({"status": "ok"})

    async def post(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.received.append((request.headers.get("Authorization", ""), body))
        if self.status >= 400:
            error = {"message": "invalid bearer token", "type": "invalid_request_error"}
            return web.json_response({"error": error}, status=self.status)
        pair = f"{body['family']}@{body['quantization']}"
        return web.json_response({"pair": pair, "created": True}, status=self.status)


@contextlib.asynccontextmanager
async def serving(stub: ControlPlaneStub) -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_post("/v1/profiles", stub.post)
    app.router.add_post("/v1/auth/check", stub.check)
    async with served(app) as url:
        yield url


def _evalset(tmp_path: Path) -> Path:
    path = tmp_path / "evals.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in EVAL_ROWS) + "\n")
    return path


def _sims(evalset: Path) -> SimFleetConfig:
    # int4 decodes 4x faster: a gap no scheduling hiccup on a loaded machine closes (at 6 ms
    # against 4 ms, make test's CPU-starved run measured int4's TPOT at 27 ms, bf16's at 7 ms)
    bf16 = sim_pair("sim-bf16", accuracy={"math": 1.0, "chat": 1.0}, tpot_base_s=0.016)
    int4 = sim_pair(
        "sim-int4", quantization="int4-w4a16", accuracy={"math": 0.0, "chat": 1.0},
        tpot_base_s=0.004,
    )  # fmt: skip
    return SimFleetConfig(pairs=[bf16, int4], answer_keys=[evalset])


async def test_fleet_command_profiles_pairs_pushes_and_compares(tmp_path: Path) -> None:
    evalset = _evalset(tmp_path)
    stub = ControlPlaneStub()
    async with run_fleet(_sims(evalset)) as sims, serving(stub) as control_plane:
        fleet_file = tmp_path / "fleet.yaml"
        pairs = [
            {"family": "gemma-3-270m", "quantization": q, "served_model_name": name,
             "endpoints": [sims.url(name)]}
            for q, name in (("bf16", "sim-bf16"), ("int4-w4a16", "sim-int4"))
        ]  # fmt: skip
        fleet_file.write_text(
            yaml.safe_dump(
                {
                    "out_dir": "reports",
                    "plots_dir": "plots",
                    "defaults": {
                        "hardware": {"name": "sim-box", "hourly_usd": 1.5},
                        "load": {
                            "concurrency": [1, 2],
                            "input_tokens": [32],
                            "output_tokens": [4],
                            "requests_per_level": 4,
                            "warmup": 0,
                        },
                        "evalsets": ["evals.jsonl"],
                    },
                    "pairs": pairs,
                }
            )
        )
        env = {**os.environ, "GEARBOX_PROF_CONTROL_PLANE_TOKEN": TOKEN}
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "profiler", "fleet", str(fleet_file), "--parallel", "2",
            "--push", control_plane, "--quiet",
            cwd=REPO, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode == 0, err.decode()
    reports = {
        p.stem: ProfileReport.model_validate_json(p.read_text())
        for p in (tmp_path / "reports").glob("*.json")
    }
    assert set(reports) == {"gemma-3-270m@bf16", "gemma-3-270m@int4-w4a16"}
    accuracy = {k: {a.category: a.accuracy for a in r.accuracy} for k, r in reports.items()}
    assert accuracy["gemma-3-270m@bf16"] == {"chat": 1.0, "math": 1.0}
    assert accuracy["gemma-3-270m@int4-w4a16"] == {"chat": 1.0, "math": 0.0}
    table = out.decode().split("\npair ")[-1]  # the comparison table comes last
    assert "gemma-3-270m@bf16" in table
    assert "gemma-3-270m@int4-w4a16" in table
    assert {p.name for p in (tmp_path / "plots").iterdir()} == {"latency.png", "accuracy_cost.png"}
    assert sorted(auth for auth, _ in stub.received) == [f"Bearer {TOKEN}"] * 2
    pushed = {ProfileReport.model_validate(body).pair for _, body in stub.received}
    assert pushed == set(reports)


async def test_fleet_goes_on_when_one_pair_fails(runtime: Runtime, tmp_path: Path) -> None:
    evalset = _evalset(tmp_path)
    sweep = build_sweep([1], [16], [4], requests_per_level=3)
    async with run_fleet(_sims(evalset)) as sims:
        good = make_plan(sims.url("sim-bf16"), "sim-bf16", None, sweep=sweep, evalsets=(evalset,))
        dead = make_plan(
            f"http://127.0.0.1:{closed_port()}", "x", None, quantization="fp8", evalsets=(evalset,)
        )
        outcome = await profile_fleet([good, dead], runtime, parallel=2)
    assert [r.pair for r in outcome.reports] == ["gemma-3-270m@bf16"]
    ((pair, message),) = outcome.failures
    assert pair == "gemma-3-270m@fp8"
    assert "connection refused" in message


async def test_push_that_the_control_plane_refuses_is_one_clear_error(
    runtime: Runtime, tmp_path: Path
) -> None:
    evalset = _evalset(tmp_path)
    sweep = build_sweep([1], [16], [4], requests_per_level=2)
    stub = ControlPlaneStub(status=401)
    accepting = ControlPlaneStub()
    async with (
        serving(accepting) as accepted,
        run_fleet(_sims(evalset)) as sims,
        serving(stub) as control_plane,
    ):
        plan = make_plan(sims.url("sim-bf16"), "sim-bf16", None, sweep=sweep, evalsets=(evalset,))
        report = await profile_pair(plan, runtime)
        with pytest.raises(PushError, match="HTTP 401: invalid bearer token"):
            await push_report(runtime.session, control_plane, "wrong", report)
        answer = await push_report(runtime.session, accepted, TOKEN, report)
    assert stub.received[0][0] == "Bearer wrong"
    assert json.loads(answer) == {"pair": "gemma-3-270m@bf16", "created": True}
    assert ProfileReport.model_validate(accepting.received[0][1]) == report


async def test_control_plane_builds_a_routing_table_from_profiled_pairs(
    runtime: Runtime, tmp_path: Path
) -> None:
    evalset = _evalset(tmp_path)
    sweep = build_sweep([1, 2, 4], [32, 128], [8], requests_per_level=4)
    async with run_fleet(_sims(evalset)) as sims:
        reports = [
            await profile_pair(
                make_plan(sims.url(name), name, None, quantization=q, sweep=sweep,
                          evalsets=(evalset,)),
                runtime,
            )
            for q, name in (("bf16", "sim-bf16"), ("int4-w4a16", "sim-int4"))
        ]  # fmt: skip
    table = build_table(reports, Policy(), datetime.now(UTC), prune=False)
    entries = {e.pair: e for e in table.entries}
    assert set(entries) == {r.pair for r in reports}
    for report in reports:
        entry = entries[report.pair]
        assert entry.served_model_name == report.served_model_name
        assert entry.chars_per_token == report.chars_per_token
        assert report.json_chars_per_token == pytest.approx(3.0, rel=0.03)  # the simulator's
        assert entry.json_chars_per_token == report.json_chars_per_token
        assert report.image_tokens == 576  # the simulator's default tokens per image
        assert entry.image_tokens == report.image_tokens
        assert entry.accuracy["math"] == next(
            a.accuracy for a in report.accuracy if a.category == "math"
        )
        assert entry.latency.max_profiled_load == 4
    assert (
        entries["gemma-3-270m@int4-w4a16"].latency.tpot_base_s
        < entries["gemma-3-270m@bf16"].latency.tpot_base_s
    )
    # The eval prompts travel with the reports and train the table's category classifier.
    for report in reports:
        assert {(p.text, p.category) for p in report.eval_prompts} == {
            ("2 + 2 =", "math"),
            ("3 + 5 =", "math"),
            ("The capital of Peru is", "chat"),
            ("The capital of Chile is", "chat"),
        }
    assert table.classifier is not None
    assert table.classifier.training.sources["profiles"] == len(EVAL_ROWS)
