"""An engine that dies mid-profile stops that pair's profile at once (issue 35): a run of
dead-engine failures (5xx, refused connections) ends it after DEAD_ENGINE_FAILURES requests,
not after every eval item and load request left (625 doomed requests before the fix).
A bad item's 4xx answer is no sign of a dead engine: those never stop a profile."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from contracts.profile_report import ProfileReport
from profiler.errors import EndpointError
from profiler.load.engine_gone import DEAD_ENGINE_FAILURES, EngineGoneError
from profiler.run.profiling import Runtime, builtin_evalsets, load_eval_sets, profile_pair
from simulator.config import FaultConfig
from simulator.fleet import run_fleet
from tests.integration.profiler.conftest import make_plan, sim_fleet, sim_pair
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

ITEMS = len(load_eval_sets(builtin_evalsets())[0])


async def test_an_engine_that_answers_500_to_everything_stops_the_profile(
    runtime: Runtime, tmp_path: Path
) -> None:
    """vLLM's engine core died behind a live API server: every request is HTTP 500."""
    faults = FaultConfig(error_rate=1.0, error_status=500)
    async with run_fleet(sim_fleet(sim_pair("sim-a", faults=faults))) as fleet:
        plan = make_plan(fleet.url("sim-a"), "sim-a", tmp_path / "r.json")
        with pytest.raises(EngineGoneError, match=r"stopped answering .*HTTP 500"):
            await profile_pair(plan, runtime)
        sent = fleet.stats("sim-a").received
    in_flight = runtime.settings.eval_concurrency
    assert ITEMS > 100
    assert DEAD_ENGINE_FAILURES <= sent <= DEAD_ENGINE_FAILURES + in_flight
    partial = (tmp_path / "r.json").read_text()
    assert '"partial": true' in partial


async def test_an_engine_that_goes_away_mid_profile_stops_it(
    runtime: Runtime, tmp_path: Path
) -> None:
    """The engine's process died: its port refuses connections from some point on."""
    slow = sim_pair("sim-a", ttft_base_s=0.05)
    async with run_fleet(sim_fleet(slow)) as fleet:
        plan = make_plan(fleet.url("sim-a"), "sim-a", tmp_path / "r.json")
        profiling = asyncio.create_task(profile_pair(plan, runtime))
        await eventually(lambda: fleet.stats("sim-a").completed >= 5, timeout_s=60)
        fleet.set_faults("sim-a", FaultConfig(refuse_connections=True))
        with pytest.raises(EngineGoneError, match=r"stopped answering .*(Connect|Disconnect)"):
            await asyncio.wait_for(profiling, timeout=60)
        answered = fleet.stats("sim-a").completed
    assert answered < ITEMS


async def test_bad_items_answered_4xx_never_stop_a_profile(runtime: Runtime) -> None:
    """Every request refused as bad input: the engine is alive, so every item is asked."""
    faults = FaultConfig(error_rate=1.0, error_status=400)
    async with run_fleet(sim_fleet(sim_pair("sim-a", faults=faults))) as fleet:
        plan = make_plan(fleet.url("sim-a"), "sim-a", None)
        with pytest.raises(EndpointError, match="no load request succeeded") as caught:
            await profile_pair(plan, runtime)
        sent = fleet.stats("sim-a").received
    assert not isinstance(caught.value, EngineGoneError)
    # and the first request of each token-rate probe (JSON characters per token, tokens per
    # image): refused, so each probe stops there
    assert sent == ITEMS + sum(level.total for level in plan.sweep) + 2


async def test_a_healthy_engine_profiles_to_the_end(runtime: Runtime, tmp_path: Path) -> None:
    async with run_fleet(sim_fleet(sim_pair("sim-a"))) as fleet:
        plan = make_plan(fleet.url("sim-a"), "sim-a", tmp_path / "r.json")
        report = await profile_pair(plan, runtime)
    assert isinstance(report, ProfileReport)
    assert report.latency[0].errors == 0
