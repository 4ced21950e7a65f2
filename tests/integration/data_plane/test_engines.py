"""The data plane against simulated vLLM engines: failover, breakers, streams, cancellation,
the official OpenAI client, and queue-depth scraping."""

from __future__ import annotations

import json

import openai
import pytest

from data_plane.app import METRICS
from simulator import FaultConfig, Fleet
from tests.integration.data_plane.conftest import FP16, INT4, MakePlane, Plane, fleet_table
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration


def body(stream: bool = False, max_tokens: int = 4) -> str:
    return json.dumps(
        {
            "model": "auto",
            "messages": [{"role": "user", "content": "Tell me something."}],
            "max_tokens": max_tokens,
            "stream": stream,
        }
    )


async def serving(make_plane: MakePlane, fleet: Fleet, **settings: object) -> Plane:
    plane = await make_plane(**settings)
    version = await plane.publisher.publish(fleet_table(fleet))
    await eventually(lambda: plane.version == version, what="table loaded")
    return plane


async def test_engine_returning_503_is_failed_over(make_plane: MakePlane, fleet: Fleet) -> None:
    plane = await serving(make_plane, fleet)
    fleet.set_faults(INT4, FaultConfig(error_rate=1.0, error_status=503))
    for _ in range(3):
        resp = await plane.client.post("/v1/chat/completions", data=body())
        assert resp.status == 200
        assert resp.headers["X-Route-Pair"] == "fam@fp16"
        assert (await resp.json())["choices"][0]["message"]["content"]
    assert fleet.stats(INT4).errors_injected == 3
    assert fleet.stats(FP16).completed == 3


async def test_engine_refusing_connections_is_failed_over(
    make_plane: MakePlane, fleet: Fleet
) -> None:
    plane = await serving(make_plane, fleet)
    fleet.set_faults(INT4, FaultConfig(refuse_connections=True))
    resp = await plane.client.post("/v1/chat/completions", data=body())
    assert resp.status == 200
    assert resp.headers["X-Route-Pair"] == "fam@fp16"
    assert plane.metric("gearbox_retries_total", reason="connect_failed") == 1


async def test_breaker_opens_on_a_dead_engine_and_recovers(
    make_plane: MakePlane, fleet: Fleet
) -> None:
    plane = await serving(make_plane, fleet, breaker_consecutive_failures=2)
    fleet.stop_pair(INT4)
    for _ in range(3):
        resp = await plane.client.post("/v1/chat/completions", data=body())
        assert resp.status == 200
    assert plane.metric("gearbox_circuit_state", endpoint="fam@int4#0") == 2
    # With the breaker open the dead engine is not tried at all.
    assert (
        plane.metric(
            "gearbox_upstream_attempts_total", endpoint="fam@int4#0", outcome="connect_failed"
        )
        == 2
    )

    await fleet.start_pair(INT4)

    async def back_on_int4() -> bool:
        resp = await plane.client.post("/v1/chat/completions", data=body())
        await resp.read()
        return resp.headers.get("X-Route-Pair") == "fam@int4"

    await eventually(back_on_int4, timeout_s=10, interval_s=0.1, what="probe closed the breaker")
    assert plane.metric("gearbox_circuit_state", endpoint="fam@int4#0") == 0


async def test_late_first_token_fails_over(make_plane: MakePlane, fleet: Fleet) -> None:
    plane = await serving(make_plane, fleet)
    fleet.set_faults(INT4, FaultConfig(slow_first_token_rate=1.0, slow_first_token_s=30.0))
    resp = await plane.client.post(
        "/v1/chat/completions", data=body(stream=True), headers={"X-TTFT-Budget-Ms": "400"}
    )
    assert resp.status == 200
    assert resp.headers["X-Route-Pair"] == "fam@fp16"
    text = await resp.text()
    assert text.rstrip().endswith("data: [DONE]")
    await eventually(lambda: fleet.stats(INT4).cancelled == 1, what="slow attempt cancelled")


async def test_broken_stream_ends_with_one_error_event(make_plane: MakePlane, fleet: Fleet) -> None:
    plane = await serving(make_plane, fleet)
    fleet.set_faults(INT4, FaultConfig(break_stream_rate=1.0, break_after_chunks=2))
    resp = await plane.client.post("/v1/chat/completions", data=body(stream=True, max_tokens=8))
    assert resp.status == 200
    events = [ln[6:] for ln in (await resp.text()).split("\n") if ln.startswith("data: ")]
    errors = [e for e in events if '"error"' in e]
    assert len(errors) == 1
    assert events[-1] == errors[0]
    assert json.loads(errors[0])["error"]["code"] == "stream_broken"
    assert "[DONE]" not in events
    assert fleet.stats(FP16).received == 0  # never retried after the first byte
    assert plane.metric("gearbox_stream_errors_total", pair="fam@int4") == 1


async def test_client_disconnect_aborts_the_engine_request(
    make_plane: MakePlane, fleet: Fleet
) -> None:
    plane = await serving(make_plane, fleet)
    resp = await plane.client.post("/v1/chat/completions", data=body(stream=True, max_tokens=3000))
    assert resp.status == 200
    assert b"data: " in await resp.content.readany()
    resp.close()
    await eventually(
        lambda: fleet.stats(INT4).cancelled == 1, timeout_s=10, what="engine cancelled"
    )
    assert fleet.stats(INT4).completed == 0


async def test_official_openai_client_works(make_plane: MakePlane, fleet: Fleet) -> None:
    plane = await serving(make_plane, fleet, api_keys="integration-key-1")
    base_url = str(plane.client.make_url("/v1"))
    async with openai.AsyncOpenAI(
        base_url=base_url, api_key="integration-key-1", max_retries=0
    ) as client:
        raw = await client.chat.completions.with_raw_response.create(
            model="auto",
            messages=[{"role": "user", "content": "Hello there."}],
            max_tokens=5,
            extra_headers={"X-Min-Accuracy": "0.85"},
        )
        assert raw.headers["X-Route-Pair"] == "fam@fp16"
        completion = raw.parse()
        assert completion.choices[0].message.content
        assert completion.model == FP16
        assert completion.usage is not None
        assert completion.usage.completion_tokens == 5

        stream = await client.chat.completions.create(
            model="fam",
            messages=[{"role": "user", "content": "Stream please."}],
            max_tokens=6,
            stream=True,
            stream_options={"include_usage": True},
        )
        parts = [c.choices[0].delta.content or "" async for c in stream if c.choices]
        assert "".join(parts)

        models = await client.models.list()
        assert {m.id for m in models.data} >= {"auto", "fam", "fam@fp16", "fam@int4"}

        with pytest.raises(openai.NotFoundError) as err:
            await client.chat.completions.create(
                model="nope", messages=[{"role": "user", "content": "x"}]
            )
        assert err.value.code == "model_not_found"
    assert plane.metric("gearbox_tokens_total", pair="fam@int4", kind="output") == 6


async def test_engine_queue_depth_is_scraped(make_plane: MakePlane, fleet: Fleet) -> None:
    plane = await serving(make_plane, fleet, scrape_interval_s=0.1)

    def scraped() -> bool:
        registry = plane.app[METRICS].registry
        return all(
            registry.get_sample_value("gearbox_engine_queue_depth", {"endpoint": e}) is not None
            for e in ("fam@fp16#0", "fam@int4#0")
        )

    await eventually(scraped, what="queue depth scraped")
