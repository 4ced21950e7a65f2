"""What OpenAI client libraries expect of the data plane (issue 13, items 7-9, 11, 15): the
context-length error code, no client retry after Gearbox already retried, model retrieval,
engine API keys, and the best-effort reason header. Through the real app, FakeUpstream."""

from __future__ import annotations

import json
from pathlib import Path

from tests.component.data_plane.conftest import CHAT_BODY, MakeHarness
from tests.component.data_plane.fakes import (
    make_table,
    ok_json,
    pair_entry,
    status,
    two_pair_table,
)

FP16, INT4 = "http://fp16-a", "http://int4-a"


def raw_body(**changes: object) -> bytes:
    return json.dumps({**CHAT_BODY, **changes}).encode()


def long_prompt(chars: int) -> bytes:
    return raw_body(messages=[{"role": "user", "content": "word " * (chars // 5)}])


# --- item 7: a prompt longer than every pair's context ----------------------------------------


async def test_prompt_longer_than_every_context_is_context_length_exceeded(
    make_harness: MakeHarness,
) -> None:
    table = make_table(
        [
            pair_entry("fam", "fp16", urls=[FP16], context_length=2048),
            pair_entry("fam", "int4", urls=[INT4], context_length=4096, precision_rank=1),
        ]
    )
    h = await make_harness(table, routes={FP16: ok_json(), INT4: ok_json()})
    for mode in ("best-effort", "strict"):
        resp = await h.client.post(
            "/v1/chat/completions", data=long_prompt(40_000), headers={"X-Budget-Mode": mode}
        )
        assert resp.status == 400, mode
        error = (await resp.json())["error"]
        assert error["code"] == "context_length_exceeded", error
        assert error["type"] == "invalid_request_error"
        assert "maximum context length is 4096 tokens" in error["message"]
    assert h.upstream.requests == []
    # One pair fits: served, no error.
    fits = await h.client.post("/v1/chat/completions", data=long_prompt(12_000))
    assert fits.status == 200
    assert fits.headers["X-Route-Pair"] == "fam@int4"


async def test_route_summary_offers_best_effort_only_to_strict_requests(
    make_harness: MakeHarness,
) -> None:
    h = await make_harness(two_pair_table([FP16], [INT4]), routes={})
    tiny = {"X-Max-Cost-Usd": "0.000000001"}
    best = await (await h.client.post("/v1/route", data=raw_body(), headers=tiny)).json()
    assert best["routed"] is False
    assert best["binding"] == "too_expensive"
    assert "use best-effort" not in best["summary"]
    assert "already relaxed" in best["summary"]
    strict = await (
        await h.client.post(
            "/v1/route", data=raw_body(), headers={**tiny, "X-Budget-Mode": "strict"}
        )
    ).json()
    assert "use best-effort mode" in strict["summary"]
    too_long = await (await h.client.post("/v1/route", data=long_prompt(80_000))).json()
    assert too_long["binding"] == "context_too_long"
    assert "best-effort" not in too_long["summary"]
    assert "maximum context length" in too_long["summary"]


# --- item 8: no client retry after Gearbox already tried the engines --------------------------


async def test_errors_after_engine_attempts_say_do_not_retry(make_harness: MakeHarness) -> None:
    h = await make_harness(
        two_pair_table([FP16], [INT4]),
        routes={FP16: status(500), INT4: status(503)},
        breaker_consecutive_failures=1,
    )
    failed = await h.client.post("/v1/chat/completions", data=raw_body())
    assert failed.status == 502
    assert failed.headers["x-should-retry"] == "false"
    # Every breaker is open now: decided without calling an engine, a retry after the
    # cooldown can succeed, so the answer says when and leaves the client free to retry.
    ejected = await h.client.post("/v1/chat/completions", data=raw_body())
    assert ejected.status == 503
    assert ejected.headers["Retry-After"] == "5"
    assert "x-should-retry" not in ejected.headers
    assert len(h.upstream.requests) == 2


async def test_503_after_refused_connections_says_when_and_do_not_retry(
    make_harness: MakeHarness,
) -> None:
    h = await make_harness(two_pair_table([FP16], [INT4]), routes={})
    resp = await h.client.post("/v1/chat/completions", data=raw_body())
    assert resp.status == 503
    assert resp.headers["x-should-retry"] == "false"
    assert resp.headers["Retry-After"] == "5"


async def test_429_after_engine_attempts_stays_retryable(make_harness: MakeHarness) -> None:
    """Overloaded engines: a client retry after Retry-After may succeed, so no
    x-should-retry: false."""
    h = await make_harness(
        two_pair_table([FP16], [INT4]), routes={FP16: status(429), INT4: status(429)}
    )
    resp = await h.client.post("/v1/chat/completions", data=raw_body())
    assert resp.status == 429
    assert resp.headers["Retry-After"] == "1"
    assert "x-should-retry" not in resp.headers


# --- item 9: GET /v1/models/{id}, max_model_len -------------------------------------------------


async def test_models_can_be_retrieved_one_by_one_with_max_model_len(
    make_harness: MakeHarness,
) -> None:
    table = make_table(
        [
            pair_entry("fam", "fp16", urls=[FP16], context_length=2048),
            pair_entry("fam", "int4", urls=[INT4], context_length=4096, precision_rank=1),
            pair_entry("other", "fp8", context_length=1024),
        ]
    )
    h = await make_harness(table, routes={})
    listed = (await (await h.client.get("/v1/models")).json())["data"]
    lengths = {m["id"]: m["max_model_len"] for m in listed}
    assert lengths == {
        "auto": 4096,
        "fam": 4096,
        "other": 1024,
        "fam@fp16": 2048,
        "fam@int4": 4096,
        "other@fp8": 1024,
    }
    for model in listed:
        resp = await h.client.get(f"/v1/models/{model['id']}")
        assert resp.status == 200
        assert await resp.json() == model
    encoded = await h.client.get("/v1/models/fam%40int4")
    assert (await encoded.json())["id"] == "fam@int4"
    missing = await h.client.get("/v1/models/fam@int8")
    assert missing.status == 404
    assert (await missing.json())["error"]["code"] == "model_not_found"
    assert h.metric("gearbox_requests_total", route="model", outcome="ok") == len(listed) + 1


# --- item 15: what best-effort does when no pair meets the floor --------------------------------


async def test_best_effort_below_the_floor_is_a_200_marked_in_the_reason(
    make_harness: MakeHarness,
) -> None:
    h = await make_harness(
        two_pair_table([FP16], [INT4]), routes={FP16: ok_json("precise"), INT4: ok_json("cheap")}
    )
    # fam@fp16 (0.9) is the most accurate pair; nothing reaches 0.95.
    below = await h.client.post(
        "/v1/chat/completions", data=raw_body(), headers={"X-Min-Accuracy": "0.95"}
    )
    assert below.status == 200
    assert below.headers["X-Route-Pair"] == "fam@fp16"
    # the reason names what is unproven for the pair that answers, and its chance
    assert below.headers["X-Route-Reason"] == (
        "best_effort_below_floor; p_meet 0.01 (floor unproven p 0.01, latency proven p 1.00)"
    )
    # The floor is met, only the time budget is not: latency is relaxed instead.
    slow = await h.client.post(
        "/v1/chat/completions",
        data=raw_body(),
        headers={"X-Min-Accuracy": "0.85", "X-Latency-Budget-Ms": "1"},
    )
    assert slow.status == 200
    assert slow.headers["X-Route-Pair"] == "fam@fp16"
    assert slow.headers["X-Route-Reason"].startswith(
        "best_effort_latency_relaxed; p_meet 0.00 (floor proven"
    )
    strict = await h.client.post(
        "/v1/chat/completions",
        data=raw_body(),
        headers={"X-Min-Accuracy": "0.95", "X-Budget-Mode": "strict"},
    )
    assert strict.status == 400
    assert (await strict.json())["error"]["code"] == "budget_infeasible"


# --- item 11: engines behind `vllm serve --api-key` --------------------------------------------

CLIENT_KEY = "client-key-never-for-engines"


async def test_each_engine_gets_its_own_key_and_never_the_clients(
    make_harness: MakeHarness, tmp_path: Path
) -> None:
    keys = tmp_path / "engine-keys.json"
    keys.write_text(json.dumps({"fam@fp16": "key-for-fp16", "*": "key-for-the-rest"}))
    h = await make_harness(
        two_pair_table([FP16], [INT4]),
        routes={FP16: ok_json(), INT4: status(503)},
        api_keys=CLIENT_KEY,
        engine_api_keys_file=keys,
    )
    resp = await h.client.post(
        "/v1/chat/completions",
        data=raw_body(),
        headers={"Authorization": f"Bearer {CLIENT_KEY}"},
    )
    assert resp.status == 200
    sent = {r.url.rsplit("/v1/", 1)[0]: r.headers for r in h.upstream.requests}
    assert sent[INT4]["Authorization"] == "Bearer key-for-the-rest"
    assert sent[FP16]["Authorization"] == "Bearer key-for-fp16"
    for headers in sent.values():
        assert CLIENT_KEY not in json.dumps(dict(headers))


async def test_the_env_key_serves_every_engine_and_an_endpoint_entry_wins(
    make_harness: MakeHarness, tmp_path: Path
) -> None:
    keys = tmp_path / "engine-keys.json"
    keys.write_text(json.dumps({"fam@int4#0": "key-for-int4-0"}))
    h = await make_harness(
        two_pair_table([FP16], [INT4]),
        routes={FP16: ok_json(), INT4: status(503)},
        engine_api_key="key-from-env",
        engine_api_keys_file=keys,
    )
    assert (await h.client.post("/v1/chat/completions", data=raw_body())).status == 200
    auth = [r.headers["Authorization"] for r in h.upstream.requests]
    assert auth == ["Bearer key-for-int4-0", "Bearer key-from-env"]
    # Neither key is in /v1/route, /v1/models or the metrics.
    texts = [
        await (await h.client.post("/v1/route", data=raw_body())).text(),
        await (await h.client.get("/v1/models")).text(),
        await (await h.client.get("/metrics")).text(),
    ]
    assert not [t for t in texts if "key-f" in t]


async def test_without_engine_keys_no_authorization_reaches_an_engine(
    make_harness: MakeHarness,
) -> None:
    h = await make_harness(two_pair_table([FP16], [INT4]), routes={INT4: ok_json()})
    resp = await h.client.post(
        "/v1/chat/completions", data=raw_body(), headers={"Authorization": "Bearer whatever-1"}
    )
    assert resp.status == 200
    assert "Authorization" not in h.upstream.requests[0].headers
