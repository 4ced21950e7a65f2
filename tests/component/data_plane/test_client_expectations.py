"""What OpenAI client libraries expect of the data plane (issue 13, items 7-9, 11, 15): the
context-length error code, no client retry after Gearbox already retried, model retrieval,
engine API keys, and the best-effort reason header. Through the real app, FakeUpstream."""

from __future__ import annotations

import json

from tests.component.data_plane.conftest import CHAT_BODY, MakeHarness
from tests.component.data_plane.fakes import (
    make_table,
    ok_json,
    pair_entry,
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
