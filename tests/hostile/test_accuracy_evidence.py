"""Hostile tenants against accuracy checks (issue 22, item 4; docs/accuracy.md "Live checks").

A client's own sampling and limits must not become evidence about an engine: free text at
high temperature is not checked at all, a huge `max_tokens` / `n` is not replayed on the
dearest pair, re-asks go the way client attempts go (engine key, breakers) within a dollar
budget. On the control plane: agreement never demotes by itself (prompts both pairs get wrong
count as disagreements); canary items with known answers do, a demotion publishes their lower
bound, and it is lifted only when fresh canaries support the profile (docs/accuracy.md
"Canary items").
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime

import orjson
import pytest
import redis.asyncio as aioredis

from contracts.accuracy_bound import lower_bound
from contracts.latency_feedback import AgreementCell, CanaryCell, LatencyFeedback
from contracts.policy import AccuracyCheckPolicy, Policy, RefitPolicy
from contracts.redis_keys import RedisKeys
from contracts.routing_table import PairEntry, RoutingTable
from control_plane.build.table import build_table
from control_plane.loop.drift import RefitCheck
from control_plane.runtime.feedback_loop import FeedbackLoop
from control_plane.runtime.metrics import ControlPlaneMetrics
from control_plane.runtime.services import Services, make_services
from control_plane.settings import ControlPlaneSettings, RedisSettings
from data_plane.upstream.port import UpstreamRequest
from tests.component.data_plane import conftest as component
from tests.component.data_plane.conftest import Harness, MakeHarness
from tests.component.data_plane.fakes import (
    FakeResponse,
    chat_json,
    demoted_table,
    make_table,
    ok_json,
    pair_entry,
    refuse,
    two_pair_table,
)
from tests.support.redis_server import RedisProcess
from tests.support.waiting import eventually
from tests.unit.control_plane.factories import make_report

make_harness = component.make_harness  # the component harness: create_app, a FakeUpstream
FP16, FP16_B, INT4 = "http://fp16-a", "http://fp16-b", "http://int4-a"
CHECK_ALL = {"sample_rate": 1.0}


def _body(content: str, **fields: object) -> str:
    return json.dumps(
        {"model": "fam@int4", "messages": [{"role": "user", "content": content}], **fields}
    )


def _to(host: str, requests: list[UpstreamRequest]) -> list[UpstreamRequest]:
    return [r for r in requests if r.url.startswith(host)]


async def test_high_temperature_free_text_is_never_checked(make_harness: MakeHarness) -> None:
    """Two right chat answers need not share a word; at temperature 1.8 they rarely do. No
    verdict could be defended, so chat answers are not re-asked and count no disagreement."""
    h = await make_harness(
        two_pair_table([FP16], [INT4], policy={"accuracy_check": CHECK_ALL}),
        routes={FP16: ok_json("Summer."), INT4: ok_json("It is the warm season, summer!")},
    )
    for _ in range(20):
        body = _body("Which season is warmest?", temperature=1.8, max_tokens=64)
        resp = await h.client.post("/v1/chat/completions", data=body)
        assert resp.status == 200
    assert _to(FP16, h.upstream.requests) == []
    assert (
        h.metric(
            "gearbox_accuracy_checks_total", pair="fam@int4", category="chat", outcome="disagree"
        )
        == 0.0
    )


async def test_a_huge_request_is_not_replayed_on_the_dearest_pair(
    make_harness: MakeHarness,
) -> None:
    """`max_tokens: 32000, n: 8` at temperature 1: the check asks both pairs greedily, one
    answer of at most the policy's cap, and compares the numbers."""
    entries = [  # a context long enough for the client's limit
        pair_entry(
            "fam", "fp16", urls=[FP16], accuracy=0.9, usd_per_mtok=4.0, context_length=65536
        ),
        pair_entry(
            "fam", "int4", urls=[INT4], accuracy=0.6, precision_rank=1, context_length=65536
        ),
    ]
    h = await make_harness(
        make_table(entries, policy={"accuracy_check": CHECK_ALL}),
        routes={FP16: ok_json("4"), INT4: ok_json("2 + 2 = 4")},
    )
    body = _body("What is 2 + 2?", temperature=1.0, n=8, max_tokens=32_000)
    resp = await h.client.post(
        "/v1/chat/completions", data=body, headers={"X-Task-Category": "math"}
    )
    assert resp.status == 200

    def agreed() -> float:
        return h.metric(
            "gearbox_accuracy_checks_total", pair="fam@int4", category="math", outcome="agree"
        )

    await eventually(lambda: agreed() == 1, what="one check, agreeing")
    (reask,) = _to(FP16, h.upstream.requests)
    sent = orjson.loads(reask.body)
    assert (sent["temperature"], sent["n"], sent["max_tokens"]) == (0.0, 1, 256)
    assert sent["model"] == "served-fam-fp16"
    # The served answer was sampled at temperature 1: the checked pair is asked greedily too.
    checked = [orjson.loads(r.body) for r in _to(INT4, h.upstream.requests)]
    assert [(c["temperature"], c["n"], c["max_tokens"]) for c in checked[1:]] == [(0.0, 1, 256)]


async def test_reasks_carry_the_engine_key(make_harness: MakeHarness) -> None:
    """Engines behind `vllm serve --api-key` answer 401 to a request without the key."""

    def keyed(content: str) -> Callable[[UpstreamRequest], FakeResponse]:
        def respond(req: UpstreamRequest) -> FakeResponse:
            if req.headers.get("Authorization") != "Bearer sk-engine":
                return FakeResponse(status=401, body=b'{"error": "no key"}')
            return FakeResponse(body=chat_json(content))

        return respond

    h = await make_harness(
        two_pair_table([FP16], [INT4], policy={"accuracy_check": CHECK_ALL}),
        routes={FP16: keyed("12"), INT4: keyed("12")},
        engine_api_key="sk-engine",
    )
    body = _body("What is 5 + 7?", temperature=0, max_tokens=16)
    resp = await h.client.post(
        "/v1/chat/completions", data=body, headers={"X-Task-Category": "math"}
    )
    assert resp.status == 200
    await eventually(
        lambda: (
            h.metric(
                "gearbox_accuracy_checks_total", pair="fam@int4", category="math", outcome="agree"
            )
            == 1
        ),
        what="the re-ask answered with the engine's key",
    )


async def test_reasks_stop_at_an_open_breaker(make_harness: MakeHarness) -> None:
    """The reference's first endpoint refuses connections: its breaker opens on the re-asks'
    failures and the checks go on at the second endpoint."""
    table = two_pair_table([FP16, FP16_B], [INT4], policy={"accuracy_check": CHECK_ALL})
    h = await make_harness(table, routes={FP16: refuse, FP16_B: ok_json("12"), INT4: ok_json("12")})
    body = _body("What is 5 + 7?", temperature=0, max_tokens=16)
    for _ in range(16):
        resp = await h.client.post(
            "/v1/chat/completions", data=body, headers={"X-Task-Category": "math"}
        )
        assert resp.status == 200

    def done() -> float:
        return sum(
            h.metric("gearbox_accuracy_checks_total", pair="fam@int4", category="math", outcome=o)
            for o in ("agree", "error")
        )

    await eventually(lambda: done() == 16, what="every check done")
    assert len(_to(FP16 + "/", h.upstream.requests)) <= 5  # the breaker's consecutive failures
    assert (
        h.metric("gearbox_accuracy_checks_total", pair="fam@int4", category="math", outcome="agree")
        >= 11
    )


async def test_reasks_stay_within_the_dollar_budget(make_harness: MakeHarness) -> None:
    budget = 2e-4  # a few checks' worst case at fp16's prices ($4 / $8 per Mtok)
    policy = {"accuracy_check": {"sample_rate": 1.0, "max_usd_per_hour": budget}}
    h = await make_harness(
        two_pair_table([FP16], [INT4], policy=policy),
        routes={FP16: ok_json("12"), INT4: ok_json("12")},
    )
    body = _body("What is 5 + 7?", temperature=0, max_tokens=16)
    for _ in range(20):
        resp = await h.client.post(
            "/v1/chat/completions", data=body, headers={"X-Task-Category": "math"}
        )
        assert resp.status == 200

    def metric(outcome: str) -> float:
        return h.metric(
            "gearbox_accuracy_checks_total", pair="fam@int4", category="math", outcome=outcome
        )

    await eventually(lambda: metric("agree") + metric("over_budget") == 20, what="all decided")
    assert metric("agree") >= 1
    assert metric("over_budget") >= 1
    assert h.metric("gearbox_accuracy_check_cost_usd_total", pair="fam@int4") <= budget


def _int4_checks(h: Harness, outcome: str, category: str = "math") -> float:
    return h.metric(
        "gearbox_accuracy_checks_total", pair="fam@int4", category=category, outcome=outcome
    )


def _probe_body() -> str:
    return _body("What is 12 + 7?", model="auto", temperature=0, max_tokens=16)


async def test_one_client_cannot_supply_a_pairs_checks(make_harness: MakeHarness) -> None:
    """A client that sends most of a category's traffic gives at most its share
    (`refit.max_client_share`, 0.1, plus one) of a pair's checks: of the ordinary checks of
    the pair that served it, and of the probes of a pair demoted there."""
    h = await make_harness(
        demoted_table(), routes={FP16: ok_json("19"), INT4: ok_json("19")}, tenant_header="x-t"
    )
    steer = {"X-Task-Category": "math", "X-Min-Accuracy": "0.5", "x-t": "steer"}
    for _ in range(20):  # answered by fp16; int4 is demoted below the floor
        resp = await h.client.post("/v1/chat/completions", data=_probe_body(), headers=steer)
        assert resp.headers["X-Route-Pair"] == "fam@fp16"
        h.clock.advance(2.0)  # a probe slot open for every request
    served = {"X-Task-Category": "extraction", "x-t": "steer"}  # int4 serves, 0.6 >= 0.5
    for _ in range(20):
        data = _body('{"a": 1}', temperature=0, max_tokens=16)
        assert (await h.client.post("/v1/chat/completions", data=data, headers=served)).ok
    await eventually(
        lambda: (
            _int4_checks(h, "client_capped") == 19
            and _int4_checks(h, "client_capped", "extraction") == 19
        ),
        what="the rest capped",
    )
    assert _int4_checks(h, "agree") == 1  # its one probe
    others = [{**steer, "x-t": f"client-{i}"} for i in range(10)]
    for headers in others:
        assert (await h.client.post("/v1/chat/completions", headers=headers, data=_probe_body())).ok
        h.clock.advance(2.0)
    await eventually(lambda: _int4_checks(h, "agree") == 11, what="each other client probed")


# --- the control plane: what a demotion publishes, and when it ends --------------------------

LOW = "fam@awq-int4"
DEMOTE = AccuracyCheckPolicy(sample_rate=0.5, min_checks=100, demote=True)
POLICY = Policy(accuracy_check=DEMOTE, refit=RefitPolicy(min_interval_s=0))


class _Clock:
    def __call__(self) -> datetime:
        return datetime.now(UTC)


def _loop_parts(
    redis_client: aioredis.Redis, redis_keys: RedisKeys, redis_server: RedisProcess
) -> tuple[Services, FeedbackLoop]:
    settings = ControlPlaneSettings(
        redis=RedisSettings(url=redis_server.url, key_prefix=redis_keys.prefix)
    )
    services = make_services(redis_client, settings, _Clock(), None)
    loop = FeedbackLoop(services, redis_keys.feedback, ControlPlaneMetrics("test"), _Clock())
    return services, loop


def _profiled() -> RoutingTable:
    """fp16 right on 190 of 200 math items, int4 on 180 of 200 (bounds at 90%)."""
    reports = [
        make_report("fam", "fp16", accuracy={"math": 0.95, "chat": 0.9}),
        make_report("fam", "awq-int4", accuracy={"math": 0.9, "chat": 0.85}),
    ]
    return build_table(reports, POLICY, datetime(2026, 1, 1, tzinfo=UTC), prune=False)


async def _send(
    redis: aioredis.Redis,
    keys: RedisKeys,
    version: int,
    agreement: tuple[int, int] | None = None,
    canary: tuple[int, int] | None = None,
) -> None:
    """One data plane's report about table `version`: (checks, agreed) re-asks of int4's
    math answers and (n, right) canary items."""
    now = datetime.now(UTC)
    report = LatencyFeedback(
        instance="dp",
        table_version=version,
        window_start=now,
        window_end=now,
        agreement=(
            AgreementCell(pair=LOW, category="math", checks=agreement[0], agreed=agreement[1]),
        )
        if agreement
        else (),
        canary=(CanaryCell(pair=LOW, category="math", n=canary[0], right=canary[1]),)
        if canary
        else (),
    )
    await redis.xadd(keys.feedback, {"report": report.model_dump_json()})


def _routed_on(entry: PairEntry | None, category: str) -> float:
    assert entry is not None
    return (entry.accuracy_bound or entry.accuracy)[category]


async def test_prompts_both_pairs_get_wrong_never_demote_a_healthy_pair(
    redis_client: aioredis.Redis, redis_keys: RedisKeys, redis_server: RedisProcess
) -> None:
    """int4 is as good as profiled (0.9: 180 of 200 canary items), but 40% of the client's
    math prompts are ones both pairs get wrong, differently: 240 of 400 re-asks agree. On
    4e607ce that agreement alone demoted int4 and published a bound far below 0.9; now it
    is not evidence against the pair."""
    services, loop = _loop_parts(redis_client, redis_keys, redis_server)
    await services.policies.put(POLICY)
    profiled = await services.publisher.publish(_profiled())
    await _send(redis_client, redis_keys, profiled.version, agreement=(400, 240))
    assert await loop.check_once() is RefitCheck.NO_DRIFT  # agreement alone, no canaries
    await _send(redis_client, redis_keys, profiled.version, canary=(200, 180))
    assert await loop.check_once() is RefitCheck.NO_DRIFT
    assert await services.tables.current_version() == profiled.version


async def test_a_fifteen_point_drop_is_demoted_to_the_canarys_lower_bound(
    redis_client: aioredis.Redis, redis_keys: RedisKeys, redis_server: RedisProcess
) -> None:
    """int4 profiled at 0.90 now answers 150 of 200 canary items right (0.75). The demotion
    publishes the canary's lower bound at the policy's confidence: a number that holds."""
    services, loop = _loop_parts(redis_client, redis_keys, redis_server)
    await services.policies.put(POLICY)
    v1 = (await services.publisher.publish(_profiled())).version
    await _send(redis_client, redis_keys, v1, agreement=(400, 380), canary=(200, 150))
    assert await loop.check_once() is RefitCheck.DEMOTED  # whatever agreement says
    demoted = await services.tables.current()
    assert demoted is not None
    assert demoted.version == v1 + 1
    published = lower_bound(150, 200, 1.0 - (1.0 - DEMOTE.confidence) / 2.0)
    assert _routed_on(demoted.entry(LOW), "math") == pytest.approx(published)
    assert 0.6 < published < 0.75
    assert LOW in demoted.demotions  # shown on the operator page as a demotion in force


async def test_a_demotion_is_lifted_when_fresh_canaries_support_the_profile(
    redis_client: aioredis.Redis, redis_keys: RedisKeys, redis_server: RedisProcess
) -> None:
    services, loop = _loop_parts(redis_client, redis_keys, redis_server)
    await services.policies.put(POLICY)
    profiled = _profiled()
    v1 = (await services.publisher.publish(profiled)).version
    await _send(redis_client, redis_keys, v1, canary=(200, 150))
    assert await loop.check_once() is RefitCheck.DEMOTED
    v2 = await services.tables.current_version()
    assert v2 == v1 + 1
    await _send(redis_client, redis_keys, v2, agreement=(400, 400))  # agreement does not lift
    assert await loop.check_once() is RefitCheck.NO_DRIFT
    await _send(redis_client, redis_keys, v2, canary=(200, 186))  # 0.93: as profiled
    assert await loop.check_once() is RefitCheck.LIFTED
    lifted = await services.tables.current()
    assert lifted is not None
    assert lifted.version == v2 + 1
    assert _routed_on(lifted.entry(LOW), "math") == pytest.approx(
        _routed_on(profiled.entry(LOW), "math")
    )
    assert lifted.demotions == {}
