"""/v1/route, /v1/models, health, readiness, /metrics, request ids, API keys and spans."""

from __future__ import annotations

import json
import re
from pathlib import Path

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.component.data_plane.conftest import CHAT_BODY, MakeHarness
from tests.component.data_plane.fakes import FakeResponse, ok_json, sse_chunks, two_pair_table

FP16, INT4 = "http://fp16-a", "http://int4-a"
METRICS_DOC = Path(__file__).resolve().parents[3] / "docs" / "METRICS.md"


def data_plane_metric_names() -> list[str]:
    """Every metric the "Data plane" table of docs/METRICS.md names."""
    text = METRICS_DOC.read_text(encoding="utf-8")
    section = text.split("## Data plane", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| (gearbox_[a-z_]+) \|", section, flags=re.MULTILINE)


async def test_route_explains_without_calling_an_engine(make_harness: MakeHarness) -> None:
    h = await make_harness(two_pair_table([FP16], [INT4]), routes={FP16: ok_json()})
    resp = await h.client.post(
        "/v1/route", data=json.dumps(CHAT_BODY), headers={"X-Min-Accuracy": "0.85"}
    )
    assert resp.status == 200
    body = await resp.json()
    assert body["routed"] is True
    assert body["pair"] == "fam@fp16"
    assert [c["pair"] for c in body["candidates"]] == ["fam@fp16"]
    assert body["rejected"] == [
        {
            "pair": "fam@int4",
            "reason": "below_accuracy_floor",
            "detail": body["rejected"][0]["detail"],
        }
    ]
    assert "fam@fp16" in body["summary"]
    assert "floor" in body["summary"]
    assert "http://" not in json.dumps(body)
    assert h.upstream.requests == []


async def test_route_explains_no_route_with_200(make_harness: MakeHarness) -> None:
    h = await make_harness(two_pair_table([FP16], [INT4]))
    resp = await h.client.post(
        "/v1/route",
        data=json.dumps(CHAT_BODY),
        headers={"X-Budget-Mode": "strict", "X-Latency-Budget-Ms": "1"},
    )
    assert resp.status == 200
    body = await resp.json()
    assert body["routed"] is False
    assert body["reason"] == "budget_infeasible"
    assert body["binding"] == "too_slow"


async def test_route_accepts_a_completions_body(make_harness: MakeHarness) -> None:
    h = await make_harness(two_pair_table([FP16], [INT4]))
    resp = await h.client.post("/v1/route", data=json.dumps({"model": "fam", "prompt": "2+2="}))
    assert resp.status == 200
    assert (await resp.json())["pair"] == "fam@int4"


async def test_models_lists_auto_families_and_pairs(make_harness: MakeHarness) -> None:
    h = await make_harness(two_pair_table([FP16], [INT4]))
    resp = await h.client.get("/v1/models")
    assert resp.status == 200
    body = await resp.json()
    assert body["object"] == "list"
    assert [m["id"] for m in body["data"]] == ["auto", "fam", "fam@int4", "fam@fp16"]
    assert all(m["object"] == "model" and isinstance(m["created"], int) for m in body["data"])


async def test_readiness_follows_the_table(make_harness: MakeHarness) -> None:
    h = await make_harness(None)
    assert (await h.client.get("/healthz")).status == 200
    not_ready = await h.client.get("/readyz")
    assert not_ready.status == 503
    assert (await not_ready.json())["ready"] is False
    early = await h.client.post("/v1/chat/completions", data=json.dumps(CHAT_BODY))
    assert early.status == 503
    assert (await early.json())["error"]["code"] == "no_healthy_upstream"
    h.swap(two_pair_table([FP16], [INT4], version=4))
    ready = await h.client.get("/readyz")
    assert ready.status == 200
    body = await ready.json()
    assert body == {"ready": True, "table_version": 4, "instance_id": body["instance_id"],
                    "warnings": []}  # fmt: skip


async def test_metrics_exports_every_documented_data_plane_series(
    make_harness: MakeHarness,
) -> None:
    h = await make_harness(two_pair_table([FP16], [INT4]), routes={INT4: ok_json()})
    await h.client.post("/v1/chat/completions", data=json.dumps(CHAT_BODY))
    resp = await h.client.get("/metrics")
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("text/plain")
    text = await resp.text()
    names = data_plane_metric_names()
    assert len(names) >= 25
    missing = [n for n in names if f"# TYPE {n} " not in text]
    assert missing == []
    assert 'gearbox_requests_total{outcome="ok",route="chat_completions"} 1.0' in text
    assert 'gearbox_routing_decision_duration_seconds_bucket{le="1e-05"}' in text


async def test_request_id_is_echoed_when_sane_and_replaced_otherwise(
    make_harness: MakeHarness,
) -> None:
    h = await make_harness(two_pair_table([FP16], [INT4]), routes={INT4: ok_json()})
    sane = await h.client.post(
        "/v1/chat/completions", data=json.dumps(CHAT_BODY), headers={"X-Request-Id": "req-42.a"}
    )
    assert sane.headers["X-Request-Id"] == "req-42.a"
    assert h.upstream.requests[-1].headers["X-Request-Id"] == "req-42.a"
    odd = await h.client.get("/healthz", headers={"X-Request-Id": "has spaces and {braces}"})
    assert re.fullmatch(r"[0-9a-f]{32}", odd.headers["X-Request-Id"])


async def test_every_answer_carries_the_request_id_streams_and_errors_included(
    make_harness: MakeHarness,
) -> None:
    """Streams send their head from the handler, errors come from the middleware, unknown
    paths from aiohttp: each carries X-Request-Id."""
    stream = FakeResponse(chunks=sse_chunks(["Hel", "lo"]), content_type="text/event-stream")
    h = await make_harness(two_pair_table([FP16], [INT4]), routes={INT4: lambda r: stream})
    asked = {"X-Request-Id": "req-7"}
    streamed = await h.client.post(
        "/v1/chat/completions", data=json.dumps({**CHAT_BODY, "stream": True}), headers=asked
    )
    assert streamed.headers["Content-Type"].startswith("text/event-stream")
    assert streamed.headers["X-Request-Id"] == "req-7"
    await streamed.read()
    bad_budget = {**asked, "X-Latency-Budget-Ms": "soon"}
    refused = await h.client.post(
        "/v1/chat/completions", data=json.dumps(CHAT_BODY), headers=bad_budget
    )
    assert (refused.status, refused.headers["X-Request-Id"]) == (400, "req-7")
    lost = await h.client.get("/v1/nothing-here", headers=asked)
    assert (lost.status, lost.headers["X-Request-Id"]) == (404, "req-7")
    routed = await h.client.post("/v1/route", data=json.dumps(CHAT_BODY), headers=asked)
    assert (routed.status, routed.headers["X-Request-Id"]) == (200, "req-7")


async def test_api_keys_guard_the_v1_endpoints(make_harness: MakeHarness) -> None:
    h = await make_harness(
        two_pair_table([FP16], [INT4]),
        routes={INT4: ok_json()},
        api_keys="first-key-1,second-key-2",
    )
    missing = await h.client.post("/v1/chat/completions", data=json.dumps(CHAT_BODY))
    assert missing.status == 401
    assert (await missing.json())["error"]["code"] == "invalid_api_key"
    wrong = await h.client.get("/v1/models", headers={"Authorization": "Bearer nope-nope-nope"})
    assert wrong.status == 401
    right = await h.client.post(
        "/v1/chat/completions",
        data=json.dumps(CHAT_BODY),
        headers={"Authorization": "Bearer second-key-2"},
    )
    assert right.status == 200
    assert "Authorization" not in h.upstream.requests[-1].headers
    assert (await h.client.get("/healthz")).status == 200
    assert (await h.client.get("/metrics")).status == 200
    assert h.metric("gearbox_requests_total", route="models", outcome="unauthorized") == 1


async def test_spans_cover_request_decision_and_attempts(make_harness: MakeHarness) -> None:
    exporter = InMemorySpanExporter()
    h = await make_harness(
        two_pair_table([FP16], [INT4]),
        routes={FP16: ok_json()},
        deps={"span_exporter": exporter},
    )
    resp = await h.client.post("/v1/chat/completions", data=json.dumps(CHAT_BODY))
    assert resp.status == 200
    spans = {s.name: s for s in exporter.get_finished_spans()}
    # the decision has no span of its own (its time is gearbox_decision_duration_seconds)
    assert set(spans) == {"gearbox.request", "gearbox.upstream"}
    request = spans["gearbox.request"].attributes or {}
    assert request["gearbox.table_version"] == 1
    assert request["gearbox.reason"] == "cheapest_feasible"
    attempts = [s for s in exporter.get_finished_spans() if s.name == "gearbox.upstream"]
    assert [(s.attributes or {})["gearbox.attempt"] for s in attempts] == [1, 2]
    assert [(s.attributes or {})["gearbox.outcome"] for s in attempts] == ["connect_failed", "ok"]
    trace_ids = {s.context.trace_id for s in exporter.get_finished_spans() if s.context}
    assert len(trace_ids) == 1
