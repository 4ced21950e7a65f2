"""Accuracy drift on live traffic, end to end: a simulated pair whose accuracy drops 15 points
at run time -> shadow re-asks on the reference pair disagree more -> the agreement's upper
bound falls below what the profiles imply, on the control plane's gauges. Agreement on client
prompts is not evidence of accuracy by itself (prompts both pairs get wrong count against the
checked pair), so even with demotion on it publishes no table: demotions are decided on canary
items (docs/accuracy.md "Canary items"; tests/hostile/test_accuracy_evidence.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

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
from data_plane.app import METRICS
from simulator import FaultConfig, Fleet, SimFleetConfig, SimPairConfig, run_fleet
from simulator.answer_key import KnownAnswer
from tests.component.data_plane.fakes import make_table, pair_entry
from tests.integration.data_plane.conftest import MakePlane, Plane
from tests.support.redis_server import RedisProcess
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

PROMPTS = [f"Compute {a} + {a * 7 % 31} (item {a})." for a in range(800)]
ANSWERS = {p: KnownAnswer("math", str(a + a * 7 % 31)) for a, p in enumerate(PROMPTS)}
CHECKS = AccuracyCheckPolicy(
    sample_rate=1.0, max_checks_per_hour=100_000, min_checks=60, demote=True
)
NO_LATENCY_REFITS = RefitPolicy(min_samples=1_000_000, window_s=600, min_interval_s=0)


async def _engines() -> tuple[SimFleetConfig, dict[str, KnownAnswer]]:
    pairs = [
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
    return SimFleetConfig(pairs=pairs), ANSWERS


def _table(fleet: Fleet) -> RoutingTable:
    entries = [
        pair_entry("fam", "fp16", urls=[fleet.url("sim-fp16")], accuracy=0.97, usd_per_mtok=4.0,
                   served_model_name="sim-fp16"),
        pair_entry("fam", "int8", urls=[fleet.url("sim-int8")], accuracy=0.9, precision_rank=1,
                   served_model_name="sim-int8"),
    ]  # fmt: skip
    for e in entries:  # profiled on 400 items: the reference's error rate is known to ~3 points
        e["accuracy_n"] = dict.fromkeys(e["accuracy_n"], 400)
    policy = Policy(accuracy_check=CHECKS, refit=NO_LATENCY_REFITS)
    return make_table(entries, policy=policy.model_dump(mode="json"))


async def _ask(plane: Plane, prompt: str) -> str:
    body = {
        "model": "auto",
        "max_tokens": 8,
        "temperature": 0,  # as a check asks: the served answer stands for the pair's
        "messages": [{"role": "user", "content": prompt}],
    }
    headers = {"X-Task-Category": "math", "X-Min-Accuracy": "0.85"}
    resp = await plane.client.post("/v1/chat/completions", data=json.dumps(body), headers=headers)
    assert resp.status == 200, await resp.text()
    await resp.read()
    return resp.headers["X-Route-Pair"]


def _checks(plane: Plane) -> float:
    registry = plane.app[METRICS].registry
    return sum(
        registry.get_sample_value(
            "gearbox_accuracy_checks_total", {"pair": "fam@int8", "category": "math", "outcome": o}
        )
        or 0.0
        # undecided: the reference said no number; dropped: the check queue was full
        for o in ("agree", "disagree", "undecided", "dropped", "error", "over_budget")
    )


async def test_a_pair_losing_accuracy_shows_in_agreement_but_is_not_demoted_on_it(
    make_plane: MakePlane,
    redis_client: aioredis.Redis,
    redis_keys: RedisKeys,
    redis_server: RedisProcess,
) -> None:
    config, answers = await _engines()
    async with run_fleet(config, answers=answers) as fleet:
        plane = await make_plane(feedback_interval_s=0.2)
        v1 = await plane.publisher.publish(_table(fleet))
        await eventually(lambda: plane.version == v1, what="table loaded")
        settings = ControlPlaneSettings(
            redis=RedisSettings(url=redis_server.url, key_prefix=redis_keys.prefix)
        )
        services = make_services(redis_client, settings, lambda: datetime.now(UTC), None)
        await services.policies.put(Policy(accuracy_check=CHECKS, refit=NO_LATENCY_REFITS))
        cp_metrics = ControlPlaneMetrics("test")
        loop = FeedbackLoop(services, redis_keys.feedback, cp_metrics, lambda: datetime.now(UTC))

        def gauge(name: str) -> float:
            value = cp_metrics.registry.get_sample_value(
                name, {"pair": "fam@int8", "category": "math"}
            )
            return -1.0 if value is None else value

        # Healthy: every answer from int8 (cheapest above the floor) is re-asked on fp16.
        assert {await _ask(plane, p) for p in PROMPTS[:100]} == {"fam@int8"}
        await eventually(lambda: _checks(plane) == 100, what="re-asks done")

        async def healthy_in_window() -> bool:
            assert await loop.check_once() is RefitCheck.NO_DRIFT
            return gauge("gearbox_cp_accuracy_checks") >= 90  # the decided ones

        await eventually(healthy_in_window, what="the healthy checks reach the control plane")
        healthy_upper = gauge("gearbox_cp_live_agreement_upper_ratio")
        expected = gauge("gearbox_cp_expected_agreement_ratio")
        r_low = lower_bound(388, 400, 0.995)  # the reference's profile, half the error each
        assert expected == pytest.approx(0.9 + r_low - 1.0)  # the least a healthy pair agrees
        assert healthy_upper >= expected
        live = gauge("gearbox_cp_live_agreement_ratio")
        assert 0.0 <= gauge("gearbox_cp_live_agreement_lower_ratio") <= live <= healthy_upper

        fleet.set_faults("sim-int8", FaultConfig(accuracy_drop=0.15))
        for p in PROMPTS[100:800]:
            assert await _ask(plane, p) == "fam@int8"
        await eventually(lambda: _checks(plane) == 800, timeout_s=20, what="re-asks done")
        cost = plane.metric("gearbox_accuracy_check_cost_usd_total", pair="fam@int8")
        assert cost > 0.0

        async def drift_seen() -> bool:
            assert await loop.check_once() is RefitCheck.NO_DRIFT  # agreement never demotes
            return gauge("gearbox_cp_live_agreement_upper_ratio") < expected

        await eventually(drift_seen, what="the drop reaches the control plane's agreement")
        assert gauge("gearbox_cp_live_agreement_lower_ratio") < expected
        assert await services.tables.current_version() == v1
