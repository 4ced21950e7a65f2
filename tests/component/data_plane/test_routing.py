"""Routing, failover and breakers through the real app with a FakeUpstream."""

from __future__ import annotations

import json

from data_plane.app import FEEDBACK
from data_plane.upstream.port import UpstreamRequest
from tests.component.data_plane.conftest import CHAT_BODY, MakeHarness
from tests.component.data_plane.fakes import (
    FakeResponse,
    Responder,
    chat_json,
    ok_json,
    status,
    two_pair_table,
)

FP16, INT4, INT4_B = "http://fp16-a", "http://int4-a", "http://int4-b"
ROUTE_HEADERS = (
    "X-Route-Pair",
    "X-Route-Reason",
    "X-Route-Table-Version",
    "X-Route-Predicted-Latency-Ms",
    "X-Route-Estimated-Cost-Usd",
    "X-Route-Attempts",
    "X-Request-Id",
)


def raw_body(**changes: object) -> bytes:
    return json.dumps({**CHAT_BODY, **changes}).encode()


async def test_request_is_routed_by_its_headers(make_harness: MakeHarness) -> None:
    h = await make_harness(
        two_pair_table([FP16], [INT4]), routes={FP16: ok_json("precise"), INT4: ok_json("cheap")}
    )
    raw = raw_body()
    cheap = await h.client.post("/v1/chat/completions", data=raw)
    assert cheap.status == 200
    assert cheap.headers["X-Route-Pair"] == "fam@int4"
    assert (await cheap.json())["choices"][0]["message"]["content"] == "cheap"

    precise = await h.client.post(
        "/v1/chat/completions", data=raw, headers={"X-Min-Accuracy": "0.85"}
    )
    assert precise.status == 200
    assert precise.headers["X-Route-Pair"] == "fam@fp16"
    assert precise.headers["X-Route-Reason"] == "cheapest_feasible"
    assert precise.headers["X-Route-Table-Version"] == "1"
    assert precise.headers["X-Route-Attempts"] == "1"
    for name in ROUTE_HEADERS:
        assert name in precise.headers
        assert "http" not in precise.headers[name]
    # Forwarded byte for byte except `model`.
    assert h.upstream.requests[-1].body == raw.replace(b'"auto"', b'"served-fam-fp16"')
    assert h.upstream.requests[-1].url == f"{FP16}/v1/chat/completions"
    assert (
        h.metric("gearbox_routing_decisions_total", pair="fam@fp16", reason="cheapest_feasible")
        == 1
    )
    assert h.metric("gearbox_requests_total", route="chat_completions", outcome="ok") == 2


async def test_pinned_pair_is_served_by_that_pair(make_harness: MakeHarness) -> None:
    h = await make_harness(
        two_pair_table([FP16], [INT4]), routes={FP16: ok_json(), INT4: ok_json()}
    )
    resp = await h.client.post("/v1/chat/completions", data=raw_body(model="fam@fp16"))
    assert resp.status == 200
    assert resp.headers["X-Route-Pair"] == "fam@fp16"


async def test_completions_endpoint_is_routed(make_harness: MakeHarness) -> None:
    h = await make_harness(
        two_pair_table([FP16], [INT4]), routes={FP16: ok_json(), INT4: ok_json()}
    )
    raw = json.dumps({"model": "fam", "prompt": "The capital of France is", "max_tokens": 4})
    resp = await h.client.post("/v1/completions", data=raw)
    assert resp.status == 200
    assert h.upstream.requests[-1].url == f"{INT4}/v1/completions"
    assert h.upstream.requests[-1].body == raw.encode().replace(b'"fam"', b'"served-fam-int4"', 1)


async def test_engine_503_fails_over_to_next_pair(make_harness: MakeHarness) -> None:
    h = await make_harness(
        two_pair_table([FP16], [INT4]), routes={FP16: ok_json("from fp16"), INT4: status(503)}
    )
    resp = await h.client.post("/v1/chat/completions", data=raw_body())
    assert resp.status == 200
    assert resp.headers["X-Route-Pair"] == "fam@fp16"
    assert resp.headers["X-Route-Attempts"] == "2"
    assert h.upstream.hosts() == [INT4, FP16]
    assert h.metric("gearbox_retries_total", reason="status_5xx") == 1
    assert h.metric("gearbox_fallbacks_total", from_pair="fam@int4", to_pair="fam@fp16") == 1
    assert (
        h.metric("gearbox_upstream_attempts_total", endpoint="fam@int4#0", outcome="status_5xx")
        == 1
    )


async def test_refused_connection_fails_over(make_harness: MakeHarness) -> None:
    h = await make_harness(two_pair_table([FP16], [INT4]), routes={FP16: ok_json()})
    resp = await h.client.post("/v1/chat/completions", data=raw_body())
    assert resp.status == 200
    assert resp.headers["X-Route-Pair"] == "fam@fp16"
    assert h.metric("gearbox_retries_total", reason="connect_failed") == 1


async def test_next_endpoint_of_the_same_pair_is_tried_first(make_harness: MakeHarness) -> None:
    h = await make_harness(
        two_pair_table([FP16], [INT4, INT4_B]),
        routes={FP16: ok_json(), INT4: status(502), INT4_B: status(502)},
    )
    h.upstream.responder = _first_fails()
    resp = await h.client.post("/v1/chat/completions", data=raw_body())
    assert resp.status == 200
    assert resp.headers["X-Route-Pair"] == "fam@int4"
    assert resp.headers["X-Route-Attempts"] == "2"
    assert set(h.upstream.hosts()) == {INT4, INT4_B}


def _first_fails() -> Responder:
    """Fails the very first request with 503, answers every later one."""
    calls = [0]

    async def respond(request: UpstreamRequest) -> FakeResponse:
        calls[0] += 1
        if calls[0] == 1:
            return FakeResponse(status=503, body=b"busy")
        return FakeResponse(body=chat_json())

    return respond


async def test_upstream_4xx_passes_through_normalised(make_harness: MakeHarness) -> None:
    flat = json.dumps(
        {"object": "error", "message": "max_tokens is too large", "type": "Bad", "code": 400}
    ).encode()
    h = await make_harness(
        two_pair_table([FP16], [INT4]), routes={FP16: ok_json(), INT4: status(400, flat)}
    )
    resp = await h.client.post("/v1/chat/completions", data=raw_body())
    assert resp.status == 400
    body = await resp.json()
    assert body["error"]["message"] == "max_tokens is too large"
    assert body["error"]["code"] == "400"
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert resp.headers["X-Route-Pair"] == "fam@int4"
    assert len(h.upstream.requests) == 1  # never retried


async def test_every_engine_failing_gives_one_502(make_harness: MakeHarness) -> None:
    h = await make_harness(
        two_pair_table([FP16], [INT4]), routes={FP16: status(500), INT4: status(503)}
    )
    resp = await h.client.post("/v1/chat/completions", data=raw_body())
    assert resp.status == 502
    body = await resp.json()
    assert body["error"]["code"] == "upstream_error"
    assert "http://" not in json.dumps(body)
    assert (
        h.metric("gearbox_requests_total", route="chat_completions", outcome="upstream_error") == 1
    )


async def test_no_reachable_engine_gives_503_with_retry_after(make_harness: MakeHarness) -> None:
    h = await make_harness(two_pair_table([FP16], [INT4]), routes={})
    resp = await h.client.post("/v1/chat/completions", data=raw_body())
    assert resp.status == 503
    assert resp.headers["Retry-After"] == "5"
    assert (await resp.json())["error"]["code"] == "no_healthy_upstream"


async def test_attempts_are_bounded(make_harness: MakeHarness) -> None:
    h = await make_harness(two_pair_table([FP16], [INT4, INT4_B]), routes={}, max_attempts=2)
    resp = await h.client.post("/v1/chat/completions", data=raw_body())
    assert resp.status == 503
    assert len(h.upstream.requests) == 2


async def test_breaker_opens_and_recovers(make_harness: MakeHarness) -> None:
    routes = {FP16: ok_json(), INT4: status(503)}
    h = await make_harness(
        two_pair_table([FP16], [INT4]), routes=routes, breaker_consecutive_failures=2
    )
    for _ in range(2):
        assert (await h.client.post("/v1/chat/completions", data=raw_body())).status == 200
    assert h.metric("gearbox_circuit_state", endpoint="fam@int4#0") == 2
    assert h.metric("gearbox_circuit_transitions_total", endpoint="fam@int4#0", to="open") == 1

    resp = await h.client.post("/v1/chat/completions", data=raw_body())
    assert resp.headers["X-Route-Pair"] == "fam@fp16"
    assert resp.headers["X-Route-Attempts"] == "1"  # the open endpoint was not tried
    assert h.upstream.hosts().count(INT4) == 2

    routes[INT4] = ok_json("back")  # the engine recovers; the cooldown passes
    h.clock.advance(6.0)
    resp = await h.client.post("/v1/chat/completions", data=raw_body())
    assert resp.headers["X-Route-Pair"] == "fam@int4"
    assert h.metric("gearbox_circuit_state", endpoint="fam@int4#0") == 0
    assert h.metric("gearbox_circuit_transitions_total", endpoint="fam@int4#0", to="half_open") == 1
    assert h.metric("gearbox_circuit_transitions_total", endpoint="fam@int4#0", to="closed") == 1


async def test_retry_budget_limits_retries(make_harness: MakeHarness) -> None:
    h = await make_harness(
        two_pair_table([FP16], [INT4]),
        routes={FP16: status(503), INT4: status(503)},
        retry_budget_ratio=0.0,
        retry_budget_min_per_s=0.1,
        retry_budget_window_s=10.0,
        breaker_consecutive_failures=100,
    )
    for _ in range(3):
        await h.client.post("/v1/chat/completions", data=raw_body())
    # A floor of one retry per 10 s: the first request retries, the next two may not.
    assert h.metric("gearbox_retries_total", reason="status_5xx") == 1
    assert h.metric("gearbox_retry_budget_exhausted_total") == 2
    assert len(h.upstream.requests) == 4


async def test_shadow_mode_serves_default_pair_and_counts_decision(
    make_harness: MakeHarness,
) -> None:
    table = two_pair_table(
        [FP16], [INT4], policy={"shadow": {"enabled": True, "default_pair": "fam@fp16"}}
    )
    h = await make_harness(table, routes={FP16: ok_json(), INT4: ok_json()})
    resp = await h.client.post("/v1/chat/completions", data=raw_body())
    assert resp.status == 200
    assert resp.headers["X-Route-Pair"] == "fam@fp16"
    assert resp.headers["X-Route-Reason"] == "shadow"
    assert h.metric("gearbox_shadow_decisions_total", pair="fam@int4") == 1
    assert h.upstream.hosts() == [FP16]


async def test_usage_feeds_cost_and_baseline_cost(make_harness: MakeHarness) -> None:
    h = await make_harness(two_pair_table([FP16], [INT4]), routes={INT4: ok_json()})
    resp = await h.client.post("/v1/chat/completions", data=raw_body())
    assert resp.status == 200
    # chat_json usage: 7 prompt + 3 completion tokens; int4 costs 1/2 USD per Mtok in/out,
    # the family's baseline (fp16, rank 0) 4/8.
    assert abs(h.metric("gearbox_cost_usd_total", pair="fam@int4") - 13e-6) < 1e-12
    assert abs(h.metric("gearbox_baseline_cost_usd_total", pair="fam@int4") - 52e-6) < 1e-12
    assert h.metric("gearbox_tokens_total", pair="fam@int4", kind="input") == 7
    assert h.metric("gearbox_tokens_total", pair="fam@int4", kind="output") == 3


async def test_usage_feeds_the_fleet_baseline_cost(make_harness: MakeHarness) -> None:
    table = two_pair_table([FP16], [INT4], fleet_baseline="fam@fp16")
    h = await make_harness(table, routes={INT4: ok_json()})
    resp = await h.client.post("/v1/chat/completions", data=raw_body())
    assert resp.status == 200
    # the fleet baseline (fp16: 4/8 USD per Mtok) for 7 + 3 tokens
    assert abs(h.metric("gearbox_fleet_baseline_cost_usd_total", pair="fam@int4") - 52e-6) < 1e-12


async def test_engines_answering_429_give_a_429(make_harness: MakeHarness) -> None:
    h = await make_harness(
        two_pair_table([FP16], [INT4]), routes={FP16: status(429), INT4: status(429)}
    )
    resp = await h.client.post("/v1/chat/completions", data=raw_body())
    assert resp.status == 429
    assert resp.headers["Retry-After"] == "1"
    assert (await resp.json())["error"]["code"] == "router_overloaded"
    assert h.metric("gearbox_retries_total", reason="status_429") == 1
    assert h.metric("gearbox_requests_total", route="chat_completions", outcome="overloaded") == 1


async def test_every_endpoint_ejected_gives_503(make_harness: MakeHarness) -> None:
    h = await make_harness(
        two_pair_table([FP16], [INT4]),
        routes={FP16: status(503), INT4: status(503)},
        breaker_consecutive_failures=1,
    )
    assert (await h.client.post("/v1/chat/completions", data=raw_body())).status == 502
    resp = await h.client.post("/v1/chat/completions", data=raw_body())
    assert resp.status == 503
    assert resp.headers["Retry-After"] == "5"
    assert (await resp.json())["error"]["code"] == "no_healthy_upstream"
    assert h.metric("gearbox_no_route_total", reason="all_unhealthy") == 1
    assert len(h.upstream.requests) == 2


async def test_served_decisions_are_counted_in_the_feedback_mix(make_harness: MakeHarness) -> None:
    """The recent mix the control plane's evidence view reads (contracts/evidence.py)."""
    h = await make_harness(
        two_pair_table([FP16], [INT4]), routes={FP16: ok_json(), INT4: ok_json()}
    )
    for floor in ("0.85", "0.85", None):
        headers = {"X-Min-Accuracy": floor} if floor else {}
        resp = await h.client.post("/v1/chat/completions", data=raw_body(), headers=headers)
        assert resp.status == 200
    (report,) = h.app[FEEDBACK].drain("dp", now=2000.0)
    cells = {(c.floor, c.pair): (c.requests, c.proven) for c in report.mix}
    assert cells[(0.85, "fam@fp16")] == (2, 2)
    assert sum(c.requests for c in report.mix) == 3
