"""Issue 13, items 1-5: a client's budget never changes what other clients get, and one failed
engine does not fail a request that others could serve (docs/reliability.md)."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from contracts.routing_table import RoutingTable
from data_plane.upstream.port import UpstreamRequest
from tests.component.data_plane.conftest import CHAT_BODY, MakeHarness
from tests.component.data_plane.fakes import (
    FakeResponse,
    chat_json,
    make_table,
    ok_json,
    pair_entry,
    sse_chunks,
    status,
    two_pair_table,
)
from tests.support.waiting import eventually

FP16, INT4 = "http://fp16-a", "http://int4-a"
HANG_S = 60.0  # longer than any test may run: only a guard or a cancel ends it
ENDPOINTS = ("fam@fp16#0", "fam@int4#0")
SHADOW = {"shadow": {"enabled": True, "default_pair": "fam@fp16"}}


def chat(**changes: object) -> bytes:
    return json.dumps({**CHAT_BODY, **changes}).encode()


def sse(words: list[str], first_after_s: float = 0.0) -> FakeResponse:
    return FakeResponse(
        chunks=sse_chunks(words), content_type="text/event-stream", delays_s={0: first_after_s}
    )


def slow_json(after_s: float, content: str = "hello") -> FakeResponse:
    return FakeResponse(body=chat_json(content), delays_s={0: after_s})


# --- item 1: the TTFT guard never blames an engine for a client's budget ------------------------


async def test_tiny_ttft_budgets_do_not_eject_engines_that_answer_in_20_ms(
    make_harness: MakeHarness,
) -> None:
    """The issue's reproduction: on the old code five streams with a 1 ms TTFT budget opened
    every breaker and the next client, with no headers, got 503 no_healthy_upstream."""
    routes = {FP16: lambda r: sse(["a"], 0.02), INT4: lambda r: sse(["b"], 0.02)}
    h = await make_harness(two_pair_table([FP16], [INT4]), routes=routes)
    for _ in range(5):
        resp = await h.client.post(
            "/v1/chat/completions", data=chat(stream=True), headers={"X-TTFT-Budget-Ms": "1"}
        )
        # Best-effort relaxed the infeasible TTFT budget: the guard uses the relaxed deadline.
        assert resp.status == 200
        assert resp.headers["X-Route-Reason"].startswith("best_effort_latency_relaxed; p_meet")
        await resp.read()
    for endpoint in ENDPOINTS:
        assert h.metric("gearbox_circuit_state", endpoint=endpoint) == 0
        assert h.metric("gearbox_circuit_transitions_total", endpoint=endpoint, to="open") == 0
    plain = await h.client.post("/v1/chat/completions", data=chat())
    assert plain.status == 200


async def test_a_missed_client_ttft_budget_moves_on_without_blaming_the_engine(
    make_harness: MakeHarness,
) -> None:
    """A feasible TTFT budget (300 ms; the table predicts 50 ms) missed by an engine that is
    within its own limit (50 ms x 3 + 0.5 s): the next pair serves, the breaker stays shut."""
    routes = {INT4: lambda r: sse(["late"], 0.45), FP16: lambda r: sse(["fast"])}
    h = await make_harness(two_pair_table([FP16], [INT4]), routes=routes)
    for _ in range(6):  # more than the 5 consecutive failures that open a breaker
        resp = await h.client.post(
            "/v1/chat/completions", data=chat(stream=True), headers={"X-TTFT-Budget-Ms": "300"}
        )
        assert resp.status == 200
        assert resp.headers["X-Route-Pair"] == "fam@fp16"
        assert resp.headers["X-Route-Reason"] == "cheapest_feasible"
        await resp.read()
    assert (
        h.metric(
            "gearbox_upstream_attempts_total", endpoint="fam@int4#0", outcome="ttft_budget_missed"
        )
        == 6
    )
    assert h.metric("gearbox_circuit_state", endpoint="fam@int4#0") == 0


async def test_a_policy_default_ttft_budget_does_not_eject_busy_engines(
    make_harness: MakeHarness,
) -> None:
    """The category's policy default TTFT budget is the client's budget too: an engine slower
    than it but within its own deadline is skipped for this request, never ejected."""
    policy = {"categories": {"chat": {"ttft_budget_s": 0.3}}}
    routes = {INT4: lambda r: sse(["busy"], 0.45), FP16: lambda r: sse(["fast"])}
    h = await make_harness(two_pair_table([FP16], [INT4], policy=policy), routes=routes)
    for _ in range(6):
        resp = await h.client.post("/v1/chat/completions", data=chat(stream=True))
        assert resp.status == 200
        assert resp.headers["X-Route-Pair"] == "fam@fp16"
        await resp.read()
    assert h.metric("gearbox_circuit_state", endpoint="fam@int4#0") == 0


async def test_a_stream_past_the_engines_own_deadline_is_an_engine_fault(
    make_harness: MakeHarness,
) -> None:
    """With the budget relaxed, an engine that sends nothing on any attempt past the attempt's
    allowance (its profiled TTFT x factor) and the stall window after it is abandoned and
    counted against it (timeout_first_byte)."""
    hung = sse(["never"], HANG_S)
    routes = {INT4: lambda r: hung, FP16: lambda r: sse(["fast"])}
    h = await make_harness(two_pair_table([FP16], [INT4]), routes=routes, engine_stall_window_s=0.2)
    resp = await h.client.post(
        "/v1/chat/completions", data=chat(stream=True), headers={"X-TTFT-Budget-Ms": "1"}
    )
    assert resp.status == 200
    assert resp.headers["X-Route-Pair"] == "fam@fp16"
    assert hung.closed
    assert (
        h.metric(
            "gearbox_upstream_attempts_total", endpoint="fam@int4#0", outcome="timeout_first_byte"
        )
        == 1
    )


async def test_every_attempt_missing_the_client_ttft_budget_is_a_504_without_blame(
    make_harness: MakeHarness,
) -> None:
    routes = {INT4: lambda r: sse(["late"], 0.45), FP16: lambda r: sse(["late"], 0.45)}
    h = await make_harness(two_pair_table([FP16], [INT4]), routes=routes)
    headers = {"X-TTFT-Budget-Ms": "300", "X-Budget-Mode": "strict"}
    resp = await h.client.post("/v1/chat/completions", data=chat(stream=True), headers=headers)
    assert resp.status == 504
    assert (await resp.json())["error"]["code"] == "budget_exhausted"
    assert len(h.upstream.requests) == 2
    for endpoint in ENDPOINTS:
        assert h.metric("gearbox_circuit_state", endpoint=endpoint) == 0


# --- item 2: the half-open probe slot is given back; the probe timeout is a setting -----------


async def test_probe_slot_is_released_when_the_retry_budget_refuses(
    make_harness: MakeHarness,
) -> None:
    routes = {FP16: status(503), INT4: status(503)}
    h = await make_harness(
        two_pair_table([FP16], [INT4]),
        routes=routes,
        retry_budget_ratio=0.0,
        retry_budget_min_per_s=0.0,  # no retries at all
    )
    for _ in range(5):
        await h.client.post("/v1/chat/completions", data=chat(model="fam@fp16"))
    assert h.metric("gearbox_circuit_state", endpoint="fam@fp16#0") == 2
    h.clock.advance(6.0)  # past the 5 s cooldown: fam@fp16#0 may take one probe
    # int4 fails; fp16 (half-open) is next: allow() takes the probe slot, the budget refuses.
    resp = await h.client.post("/v1/chat/completions", data=chat())
    assert resp.status == 502
    assert h.metric("gearbox_retry_budget_exhausted_total") == 1
    assert h.upstream.hosts().count(FP16) == 5  # no probe went out
    routes[FP16] = ok_json("back")
    # The slot was given back: the next request probes fp16 at once (the old code kept it
    # taken for the 30 s probe timeout and answered 503).
    resp = await h.client.post("/v1/chat/completions", data=chat(model="fam@fp16"))
    assert resp.status == 200
    assert h.metric("gearbox_circuit_state", endpoint="fam@fp16#0") == 0


async def test_probe_timeout_is_a_setting(make_harness: MakeHarness) -> None:
    routes = {FP16: status(503)}
    h = await make_harness(
        two_pair_table([FP16], [INT4]),
        routes=routes,
        breaker_probe_timeout_s=2.0,
        engine_deadline_factor=0.0,  # the probe below hangs until cancelled
    )
    for _ in range(5):
        await h.client.post("/v1/chat/completions", data=chat(model="fam@fp16"))
    h.clock.advance(6.0)
    hung = slow_json(HANG_S)
    routes[FP16] = lambda r: hung
    probe = asyncio.ensure_future(
        h.client.post("/v1/chat/completions", data=chat(model="fam@fp16"))
    )
    await eventually(lambda: hung in h.upstream.responses, timeout_s=10, what="probe sent")
    # The probe is out: everyone else waits for it ...
    assert (await h.client.post("/v1/chat/completions", data=chat(model="fam@fp16"))).status == 503
    routes[FP16] = ok_json("back")
    h.clock.advance(2.5)  # ... until the configured probe timeout (not 30 s) frees the slot
    resp = await h.client.post("/v1/chat/completions", data=chat(model="fam@fp16"))
    assert resp.status == 200
    probe.cancel()
    with pytest.raises(asyncio.CancelledError):
        await probe


# --- item 3: shadow mode is transparent -------------------------------------------------------


async def test_shadow_mode_serves_what_the_router_would_refuse(
    make_harness: MakeHarness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="data_plane.decision_step")
    h = await make_harness(
        two_pair_table([FP16], [INT4], policy=SHADOW), routes={FP16: ok_json(), INT4: ok_json()}
    )
    headers = {"X-Budget-Mode": "strict", "X-Min-Accuracy": "0.99"}  # no pair reaches 0.99
    resp = await h.client.post("/v1/chat/completions", data=chat(), headers=headers)
    assert resp.status == 200
    assert resp.headers["X-Route-Pair"] == "fam@fp16"
    assert resp.headers["X-Route-Reason"] == "shadow"
    assert h.metric("gearbox_no_route_total", reason="budget_infeasible") == 1  # still counted
    logged = [getattr(r, "reason", None) for r in caplog.records if r.message == "shadow decision"]
    assert logged == ["budget_infeasible"]
    unknown = await h.client.post("/v1/chat/completions", data=chat(model="nope"))
    assert unknown.status == 404


async def test_shadow_traffic_has_no_router_deadline_or_ttft_guard(
    make_harness: MakeHarness,
) -> None:
    routes = {FP16: lambda r: slow_json(0.8), INT4: ok_json()}
    h = await make_harness(two_pair_table([FP16], [INT4], policy=SHADOW), routes=routes)
    budget = {"X-Latency-Budget-Ms": "300"}  # the default pair takes 0.8 s
    resp = await h.client.post("/v1/chat/completions", data=chat(), headers=budget)
    assert resp.status == 200
    assert resp.headers["X-Route-Pair"] == "fam@fp16"
    routes[FP16] = lambda r: sse(["late"], 0.8)
    resp = await h.client.post(
        "/v1/chat/completions", data=chat(stream=True), headers={"X-TTFT-Budget-Ms": "100"}
    )
    assert resp.status == 200
    assert "late" in await resp.text()
    assert len(h.upstream.requests) == 2  # one attempt each: nothing abandoned or retried


# --- item 4: the quality guard obeys the cost ceiling, the retry budget, the attempt limit ----


async def test_quality_guard_obeys_max_cost(make_harness: MakeHarness) -> None:
    """The issue's case: capped at 2.85e-5 USD, re-asked on a pair estimated at 7.6e-5 USD."""
    h = await make_harness(
        two_pair_table([FP16], [INT4]), routes={INT4: ok_json(""), FP16: ok_json("real")}
    )
    resp = await h.client.post(
        "/v1/chat/completions", data=chat(), headers={"X-Max-Cost-Usd": "0.0000285"}
    )
    assert resp.status == 200
    assert resp.headers["X-Route-Pair"] == "fam@int4"
    assert float(resp.headers["X-Route-Estimated-Cost-Usd"]) <= 2.85e-5
    assert h.upstream.hosts() == [INT4]
    # Without the cap the same answer is re-asked.
    resp = await h.client.post("/v1/chat/completions", data=chat())
    assert resp.headers["X-Route-Pair"] == "fam@fp16"


async def test_quality_guard_obeys_the_retry_budget(make_harness: MakeHarness) -> None:
    h = await make_harness(
        two_pair_table([FP16], [INT4]),
        routes={INT4: ok_json(""), FP16: ok_json("real")},
        retry_budget_ratio=0.0,
        retry_budget_min_per_s=0.0,
    )
    resp = await h.client.post("/v1/chat/completions", data=chat())
    assert resp.headers["X-Route-Pair"] == "fam@int4"
    assert h.upstream.hosts() == [INT4]
    assert h.metric("gearbox_retry_budget_exhausted_total") == 1


async def test_quality_guard_obeys_the_attempt_limit(make_harness: MakeHarness) -> None:
    h = await make_harness(
        two_pair_table([FP16], [INT4]),
        routes={INT4: ok_json(""), FP16: ok_json("real")},
        max_attempts=1,
    )
    resp = await h.client.post("/v1/chat/completions", data=chat())
    assert resp.headers["X-Route-Pair"] == "fam@int4"
    assert resp.headers["X-Route-Attempts"] == "1"
    assert h.upstream.hosts() == [INT4]


async def test_quality_guard_costs_both_answers(make_harness: MakeHarness) -> None:
    h = await make_harness(
        two_pair_table([FP16], [INT4]), routes={INT4: ok_json(""), FP16: ok_json("real")}
    )
    resp = await h.client.post("/v1/chat/completions", data=chat())
    assert resp.headers["X-Route-Pair"] == "fam@fp16"
    # usage of chat_json(): 7 prompt + 3 completion tokens; int4 $1/$2 per Mtok, fp16 $4/$8.
    assert h.metric("gearbox_cost_usd_total", pair="fam@int4") == pytest.approx(13e-6)
    assert h.metric("gearbox_cost_usd_total", pair="fam@fp16") == pytest.approx(52e-6)
    assert h.metric("gearbox_tokens_total", pair="fam@int4", kind="output") == 3
    assert h.metric("gearbox_quality_guard_reask_cost_usd_total", pair="fam@int4") == pytest.approx(
        52e-6
    )


# --- item 5: a failed engine does not fail a request that others could serve ------------------


def _slow_fp16_table() -> RoutingTable:
    """fam@int4 (cheap, fast) and fam@fp16 predicted at over a second (too slow for 500 ms)."""
    return make_table(
        [
            pair_entry("fam", "fp16", urls=[FP16], accuracy=0.9, usd_per_mtok=4.0, ttft_base_s=1.2),
            pair_entry("fam", "int4", urls=[INT4], accuracy=0.6, precision_rank=1),
        ]
    )


async def test_best_effort_falls_back_to_latency_relaxed_pairs(make_harness: MakeHarness) -> None:
    # fp16 answers after 0.8 s: past the 500 ms budget + 0.2 s grace, inside the default deadline.
    routes = {INT4: status(503), FP16: lambda r: slow_json(0.8, "slow")}
    h = await make_harness(_slow_fp16_table(), routes=routes)
    headers = {"X-Latency-Budget-Ms": "500", "X-Min-Accuracy": "0.5"}
    resp = await h.client.post("/v1/chat/completions", data=chat(), headers=headers)
    assert resp.status == 200
    assert resp.headers["X-Route-Pair"] == "fam@fp16"
    assert resp.headers["X-Route-Reason"].startswith("best_effort_latency_relaxed; p_meet ")
    assert resp.headers["X-Route-Attempts"] == "2"
    assert h.metric("gearbox_fallbacks_total", from_pair="fam@int4", to_pair="fam@fp16") == 1
    # Strict mode keeps its promise instead: the budget or nothing.
    strict = {**headers, "X-Budget-Mode": "strict"}
    resp = await h.client.post("/v1/chat/completions", data=chat(), headers=strict)
    assert resp.status == 502


async def test_the_fallback_never_goes_below_the_accuracy_floor(make_harness: MakeHarness) -> None:
    """Only fam@fp16 (0.9) meets a 0.8 floor; when it fails, fam@int4 (0.6) is not asked."""
    h = await make_harness(
        two_pair_table([FP16], [INT4]), routes={FP16: status(503), INT4: ok_json()}
    )
    resp = await h.client.post(
        "/v1/chat/completions", data=chat(), headers={"X-Min-Accuracy": "0.8"}
    )
    assert resp.status == 502
    assert h.upstream.hosts() == [FP16]


async def test_a_hung_attempt_is_abandoned_for_the_next_candidate(
    make_harness: MakeHarness,
) -> None:
    """Profiled at 58 ms for its 8 tokens (max_tokens): the endpoint sends nothing, so the
    attempt is abandoned once overdue (58 ms x 3) and the endpoint silent for the stall window
    (1.5 s) after that, while 0.8 s of the request's deadline remain."""
    hung = slow_json(HANG_S)
    h = await make_harness(
        two_pair_table([FP16], [INT4]), routes={INT4: lambda r: hung, FP16: ok_json("ok")}
    )
    resp = await h.client.post(
        "/v1/chat/completions", data=chat(), headers={"X-Latency-Budget-Ms": "2000"}
    )
    assert resp.status == 200
    assert resp.headers["X-Route-Pair"] == "fam@fp16"
    assert hung.closed
    assert (
        h.metric(
            "gearbox_upstream_attempts_total", endpoint="fam@int4#0", outcome="timeout_first_byte"
        )
        == 1
    )


async def test_traffic_to_other_engines_is_unchanged_by_the_engine_deadline(
    make_harness: MakeHarness,
) -> None:
    """An answer from an endpoint that is not stalled is never abandoned (0.3 s here: past
    its allowance, 58 ms x 3, but well inside the stall window)."""
    seen: list[UpstreamRequest] = []

    def record(req: UpstreamRequest) -> FakeResponse:
        seen.append(req)
        return slow_json(0.3)

    h = await make_harness(two_pair_table([FP16], [INT4]), routes={INT4: record})
    resp = await h.client.post("/v1/chat/completions", data=chat())
    assert resp.status == 200
    assert len(seen) == 1


async def test_an_engine_4xx_passes_through_without_a_relaxed_retry(
    make_harness: MakeHarness,
) -> None:
    """A 4xx is the request's fault, not the engine's: no relaxed pair is asked."""
    h = await make_harness(_slow_fp16_table(), routes={INT4: status(400), FP16: ok_json()})
    headers = {"X-Latency-Budget-Ms": "500", "X-Min-Accuracy": "0.5"}
    resp = await h.client.post("/v1/chat/completions", data=chat(), headers=headers)
    assert resp.status == 400
    assert resp.headers["X-Route-Reason"] == "cheapest_feasible"
    assert h.upstream.hosts() == [INT4]
