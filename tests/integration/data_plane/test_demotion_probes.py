"""Probes of a demoted pair, end to end: a pair demoted in math gets no client traffic there
(its demoted bound misses the floor), so only the data plane's probes check it, on the
requests its reference answered. Their agreement is reported, but agreement never decides a
lift or a demotion by itself: a lift needs canary items (docs/accuracy.md "Canary items";
the rule is tested in tests/unit/control_plane/test_canary_evidence.py and
tests/hostile/test_accuracy_evidence.py). A healthy pair's demotion is not lifted by agreeing
probes, and a truly degraded pair's stays, window after window."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
import redis.asyncio as aioredis

from contracts.accuracy_bound import lower_bound
from contracts.policy import AccuracyCheckPolicy, Policy, RefitPolicy
from contracts.redis_keys import RedisKeys
from contracts.routing_table import RoutingTable
from control_plane.loop.accuracy_drift import DemotionPlan, PairAgreement
from control_plane.loop.demotion import apply_demotions
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

PROMPTS = [f"Compute {a} + {a * 5 % 29} (item {a})." for a in range(400)]
ANSWERS = {p: KnownAnswer("math", str(a + a * 5 % 29)) for a, p in enumerate(PROMPTS)}
CHECKS = AccuracyCheckPolicy(
    sample_rate=1.0, max_checks_per_hour=100_000, min_checks=100, demote=True
)
POLICY = Policy(
    accuracy_check=CHECKS,
    refit=RefitPolicy(min_samples=1_000_000, window_s=600, min_interval_s=0),
)
LOW = "fam@int8"


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


def _demoted(fleet: Fleet) -> RoutingTable:
    """The profiled table (fp16 right on 388 of 400 math items, int8 on 360, with their 90%
    bounds), with int8 demoted in math to 0.6 as a demotion on some earlier evidence would
    have left it: below the 0.85 floor."""
    entries = [
        pair_entry("fam", "fp16", urls=[fleet.url("sim-fp16")], accuracy=0.97, usd_per_mtok=4.0,
                   served_model_name="sim-fp16"),
        pair_entry("fam", "int8", urls=[fleet.url("sim-int8")], accuracy=0.9, precision_rank=1,
                   served_model_name="sim-int8"),
    ]  # fmt: skip
    for e in entries:
        e["accuracy_n"] = dict.fromkeys(e["accuracy_n"], 400)
        right = round(e["accuracy"]["math"] * 400)
        e["accuracy_bound"] = dict.fromkeys(e["accuracy"], lower_bound(right, 400, 0.9))
    profiled = make_table(entries, policy=POLICY.model_dump(mode="json"))
    evidence = PairAgreement(
        pair=LOW, category="math", checks=100, agreed=60, upper=0.7, lower=0.48, expected=0.87,
        accuracy_lower=0.6, accuracy_upper=0.73, profile_bound=0.9, implied=0.62, demoted=False,
    )  # fmt: skip
    plan = DemotionPlan(demote=(evidence,), lift=())
    return apply_demotions(profiled, plan, 600.0, datetime.now(UTC))


async def _ask(plane: Plane, prompt: str) -> str:
    body = {
        "model": "auto",
        "max_tokens": 8,
        "temperature": 0,  # greedy within the cap: the reference's served answer stands
        "messages": [{"role": "user", "content": prompt}],
    }
    headers = {"X-Task-Category": "math", "X-Min-Accuracy": "0.85"}
    resp = await plane.client.post("/v1/chat/completions", data=json.dumps(body), headers=headers)
    assert resp.status == 200, await resp.text()
    await resp.read()
    return resp.headers["X-Route-Pair"]


def _probes(plane: Plane) -> float:
    registry = plane.app[METRICS].registry
    return sum(
        registry.get_sample_value(
            "gearbox_accuracy_checks_total", {"pair": LOW, "category": "math", "outcome": o}
        )
        or 0.0
        for o in ("agree", "disagree")
    )


async def _probe_and_check(
    make_plane: MakePlane,
    redis_client: aioredis.Redis,
    redis_keys: RedisKeys,
    redis_server: RedisProcess,
    accuracy_drop: float,
) -> tuple[list[RefitCheck], RoutingTable, str, int]:
    """Publish the demoted table, send the 400 math prompts (none may reach int8), and run
    the loop's checks until one acts or it has seen every probe: (the checks' outcomes, the
    current table after them, the pair a math request then goes to, the demoted table's
    version)."""
    async with run_fleet(_fleet(), answers=ANSWERS) as fleet:
        fleet.set_faults("sim-int8", FaultConfig(accuracy_drop=accuracy_drop))
        plane = await make_plane(feedback_interval_s=0.2, accuracy_probe_interval_s=0.001)
        demoted = await plane.publisher.publish(_demoted(fleet))
        await eventually(lambda: plane.version == demoted, what="demoted table loaded")
        settings = ControlPlaneSettings(
            redis=RedisSettings(url=redis_server.url, key_prefix=redis_keys.prefix)
        )
        services = make_services(redis_client, settings, lambda: datetime.now(UTC), None)
        await services.policies.put(POLICY)
        metrics = ControlPlaneMetrics("test")
        loop = FeedbackLoop(services, redis_keys.feedback, metrics, lambda: datetime.now(UTC))
        for prompt in PROMPTS:
            assert await _ask(plane, prompt) == "fam@fp16"  # no client traffic for int8
        await eventually(lambda: _probes(plane) >= 200, timeout_s=20, what="probes decided")
        probed = _probes(plane)
        outcomes: list[RefitCheck] = []

        async def decided() -> bool:
            outcomes.append(await loop.check_once())
            seen = metrics.registry.get_sample_value(
                "gearbox_cp_accuracy_checks", {"pair": LOW, "category": "math"}
            )
            return outcomes[-1] is not RefitCheck.NO_DRIFT or (seen or 0.0) >= probed

        await eventually(decided, what="the probes judged by the loop")
        current = await services.tables.current()
        assert current is not None
        await eventually(lambda: plane.version == current.version, what="current table loaded")
        return outcomes, current, await _ask(plane, PROMPTS[0]), demoted


async def test_agreeing_probes_alone_do_not_lift_a_demotion(
    make_plane: MakePlane,
    redis_client: aioredis.Redis,
    redis_keys: RedisKeys,
    redis_server: RedisProcess,
) -> None:
    outcomes, current, routed, demoted = await _probe_and_check(
        make_plane, redis_client, redis_keys, redis_server, accuracy_drop=0.0
    )
    assert set(outcomes) == {RefitCheck.NO_DRIFT}  # every probe judged, no table published
    assert current.version == demoted
    assert LOW in current.demotions  # the lift waits for canary items
    assert routed == "fam@fp16"


async def test_a_degraded_pair_stays_demoted_under_probes(
    make_plane: MakePlane,
    redis_client: aioredis.Redis,
    redis_keys: RedisKeys,
    redis_server: RedisProcess,
) -> None:
    """int8 really lost 30 points: the probes' agreement keeps contradicting its profile."""
    outcomes, current, routed, demoted = await _probe_and_check(
        make_plane, redis_client, redis_keys, redis_server, accuracy_drop=0.3
    )
    assert set(outcomes) == {RefitCheck.NO_DRIFT}
    assert current.version == demoted
    assert "math" in current.demotions[LOW]
    assert routed == "fam@fp16"


class _WindowClock:
    """The loop's clock: a refit window (`POLICY.refit.window_s`) past `start`, so each check
    reads the feedback sent since `start` and nothing older: one window per round."""

    def __init__(self) -> None:
        self.start = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.start + timedelta(seconds=POLICY.refit.window_s)


async def test_a_degraded_pair_stays_demoted_window_after_window(
    make_plane: MakePlane,
    redis_client: aioredis.Redis,
    redis_keys: RedisKeys,
    redis_server: RedisProcess,
) -> None:
    """int8 really lost 15 points (0.90 -> 0.75): three windows of about 125 probes each,
    every one judged by the loop, and the demotion stands through all of them, never lifted
    and re-demoted. (The old lift rule, "the checks no longer contradict the profile", lifts
    such a window at least 75% of the time: 0.75 agreement on 125 checks has an upper bound of
    0.84, above the 0.819 a pair at its bound can show.)"""
    async with run_fleet(_fleet(), answers=ANSWERS) as fleet:
        fleet.set_faults("sim-int8", FaultConfig(accuracy_drop=0.15))
        plane = await make_plane(feedback_interval_s=0.2, accuracy_probe_interval_s=0.001)
        demoted = await plane.publisher.publish(_demoted(fleet))
        await eventually(lambda: plane.version == demoted, what="demoted table loaded")
        settings = ControlPlaneSettings(
            redis=RedisSettings(url=redis_server.url, key_prefix=redis_keys.prefix)
        )
        services = make_services(redis_client, settings, lambda: datetime.now(UTC), None)
        await services.policies.put(POLICY)
        metrics = ControlPlaneMetrics("test")
        clock = _WindowClock()
        loop = FeedbackLoop(services, redis_keys.feedback, metrics, clock)
        judged: list[tuple[float, RefitCheck]] = []
        for window in range(3):
            before, clock.start = _probes(plane), datetime.now(UTC)
            for prompt in PROMPTS[window * 130 : (window + 1) * 130]:
                assert await _ask(plane, prompt) == "fam@fp16"  # no client traffic for int8

            def decided(b: float = before) -> bool:
                return _probes(plane) - b >= 115

            await eventually(decided, timeout_s=20, what="probes decided")
            probed = _probes(plane) - before

            async def seen_all(p: float = probed) -> bool:
                outcome = await loop.check_once()
                seen = metrics.registry.get_sample_value(
                    "gearbox_cp_accuracy_checks", {"pair": LOW, "category": "math"}
                )
                judged.append((seen or 0.0, outcome))
                return outcome is not RefitCheck.NO_DRIFT or (seen or 0.0) >= p

            await eventually(seen_all, what="the window's probes judged by the loop")
        assert {outcome for _, outcome in judged} == {RefitCheck.NO_DRIFT}
        assert sum(seen >= POLICY.accuracy_check.min_checks for seen, _ in judged) >= 3
        assert await services.tables.current_version() == demoted
        assert await _ask(plane, PROMPTS[-1]) == "fam@fp16"
