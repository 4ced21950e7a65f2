"""Canary items end to end (docs/accuracy.md "Canary items"): a simulated pair whose accuracy
dropped 15 points below its profile answers the profiler's held-out math items that the data
plane sends it -> the feedback summaries carry (right, n) -> the control plane's loop demotes
it, publishing the canary's Clopper-Pearson lower bound, and leaves the healthy pair alone.
No client traffic and no agreement re-asks are involved (`sample_rate` 0)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from contracts.accuracy_bound import lower_bound
from contracts.policy import AccuracyCheckPolicy, Policy, RefitPolicy
from contracts.redis_keys import RedisKeys
from contracts.routing_table import RoutingTable
from control_plane.loop.drift import RefitCheck
from control_plane.runtime.feedback_loop import FeedbackLoop
from control_plane.runtime.metrics import ControlPlaneMetrics
from control_plane.runtime.services import make_services
from control_plane.settings import ControlPlaneSettings, RedisSettings
from data_plane.checks.canary_items import SHIPPED_ITEMS
from data_plane.settings import FeedbackSettings
from simulator import FaultConfig, Fleet, SimFleetConfig, SimPairConfig, run_fleet
from simulator.answer_key import load_answer_keys
from tests.component.data_plane.fakes import make_table, pair_entry
from tests.integration.data_plane.conftest import MakePlane
from tests.support.redis_server import RedisProcess
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

HOLDOUT = Path(__file__).parents[3] / "profiler" / "evalsets" / "holdout" / "math.jsonl"
CHECKS = AccuracyCheckPolicy(sample_rate=0.0, min_checks=200, demote=True)
POLICY = Policy(
    accuracy_check=CHECKS,
    refit=RefitPolicy(min_samples=1_000_000, window_s=600, min_interval_s=0),
)


def _fleet() -> SimFleetConfig:
    return SimFleetConfig(
        pairs=[
            SimPairConfig(
                name=f"sim-{q}",
                family="fam",
                quantization=q,
                ttft_base_s=0.001,
                tpot_base_s=0.001,
                accuracy={"math": acc},
                seed=seed,
            )
            for q, acc, seed in (("fp16", 0.97, 1), ("int8", 0.9, 2))
        ]
    )


def _table(fleet: Fleet) -> RoutingTable:
    entries = [
        pair_entry("fam", "fp16", urls=[fleet.url("sim-fp16")], accuracy=0.97, usd_per_mtok=4.0,
                   served_model_name="sim-fp16"),
        pair_entry("fam", "int8", urls=[fleet.url("sim-int8")], accuracy=0.9, precision_rank=1,
                   served_model_name="sim-int8"),
    ]  # fmt: skip
    return make_table(entries, policy=POLICY.model_dump(mode="json"))


async def test_a_fifteen_point_drop_is_demoted_on_canary_items(
    make_plane: MakePlane,
    redis_client: aioredis.Redis,
    redis_keys: RedisKeys,
    redis_server: RedisProcess,
) -> None:
    async with run_fleet(_fleet(), answers=load_answer_keys([HOLDOUT])) as fleet:
        fleet.set_faults("sim-int8", FaultConfig(accuracy_drop=0.15))
        plane = await make_plane(
            feedback_interval_s=0.2,
            feedback_canary_items_per_minute=3000.0,
            feedback_canary_usd_per_hour=100.0,
            feedback_canary_capacity_share=1.0,  # the table's 1,000 tokens a second: 7,500/min
            feedback_canary_items_file=str(HOLDOUT),
        )
        v1 = await plane.publisher.publish(_table(fleet))
        await eventually(lambda: plane.version == v1, what="table loaded")
        settings = ControlPlaneSettings(
            redis=RedisSettings(url=redis_server.url, key_prefix=redis_keys.prefix)
        )
        services = make_services(redis_client, settings, lambda: datetime.now(UTC), None)
        await services.policies.put(POLICY)
        metrics = ControlPlaneMetrics("test")
        loop = FeedbackLoop(services, redis_keys.feedback, metrics, lambda: datetime.now(UTC))
        outcomes: list[RefitCheck] = []

        async def decided() -> bool:
            outcomes.append(await loop.check_once())
            return outcomes[-1] is not RefitCheck.NO_DRIFT

        await eventually(decided, timeout_s=60, what="enough canary items for a decision")
        assert outcomes[-1] is RefitCheck.DEMOTED
        demoted = await services.tables.current()
        assert demoted is not None
        assert set(demoted.demotions) == {"fam@int8"}  # the healthy fp16 is not demoted
        kept = demoted.demotions["fam@int8"]["math"]
        assert kept.checks >= 200
        published = lower_bound(kept.agreed, kept.checks, 1.0 - (1.0 - CHECKS.confidence) / 2)
        entry = demoted.entry("fam@int8")
        assert entry is not None
        assert entry.accuracy["math"] == pytest.approx(published)  # routed on (no bounds here)
        assert 0.5 < published < 0.765  # below the truth, 0.9 less 15%, and far above 0.000
        assert demoted.refit is not None
        assert demoted.refit.note.startswith("accuracy demoted from canary items: ")
        int8_items = plane.metric("gearbox_canary_items_total", pair="fam@int8", category="math",
                                  outcome="right")  # fmt: skip
        assert int8_items > 0


def _math_only(entry: dict[str, object], accuracy: float) -> dict[str, object]:
    return {**entry, "accuracy": {"math": accuracy}, "accuracy_n": {"math": 400}}


async def test_at_the_defaults_a_drifting_pair_is_demoted_without_configuration(
    make_plane: MakePlane,
    redis_client: aioredis.Redis,
    redis_keys: RedisKeys,
    redis_server: RedisProcess,
) -> None:
    """A fresh deployment: no item file, the default rate and budget, the default policy (no
    policy stored). The data plane sends the shipped held-out items, the simulated engines
    answer them from their key, and the loop demotes the pair that lost 15 points (math
    only, so all its items are math: 150 a minute, the 2% capacity share of the table's
    1,000 tokens a second; a decision within about a minute). Only the feedback interval is
    shortened. On c680376 nothing was sent (rate 0, no file)."""
    defaults = FeedbackSettings()
    async with run_fleet(_fleet(), answers=load_answer_keys([SHIPPED_ITEMS])) as fleet:
        fleet.set_faults("sim-int8", FaultConfig(accuracy_drop=0.15))
        plane = await make_plane(
            feedback_interval_s=0.5,
            feedback_canary_items_per_minute=defaults.canary_items_per_minute,  # undo the harness
        )
        entries = [
            _math_only(pair_entry("fam", "fp16", urls=[fleet.url("sim-fp16")], accuracy=0.97,
                                  usd_per_mtok=4.0, served_model_name="sim-fp16"), 0.97),
            _math_only(pair_entry("fam", "int8", urls=[fleet.url("sim-int8")], accuracy=0.9,
                                  precision_rank=1, served_model_name="sim-int8"), 0.9),
        ]  # fmt: skip
        v1 = await plane.publisher.publish(make_table(entries))
        await eventually(lambda: plane.version == v1, what="table loaded")
        settings = ControlPlaneSettings(
            redis=RedisSettings(url=redis_server.url, key_prefix=redis_keys.prefix)
        )
        services = make_services(redis_client, settings, lambda: datetime.now(UTC), None)
        metrics = ControlPlaneMetrics("test")
        loop = FeedbackLoop(services, redis_keys.feedback, metrics, lambda: datetime.now(UTC))
        outcomes: list[RefitCheck] = []

        async def decided() -> bool:
            outcomes.append(await loop.check_once())
            return outcomes[-1] is not RefitCheck.NO_DRIFT

        await eventually(decided, timeout_s=240, interval_s=1.0, what="a decision")
        assert outcomes[-1] is RefitCheck.DEMOTED
        demoted = await services.tables.current()
        assert demoted is not None
        assert set(demoted.demotions) == {"fam@int8"}
        assert demoted.demotions["fam@int8"]["math"].checks >= Policy().accuracy_check.min_checks
