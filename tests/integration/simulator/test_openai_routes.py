"""The OpenAI routes as the official `openai` client sees them, plus models/health/metrics."""

from __future__ import annotations

import json

import aiohttp
import openai
import pytest

from simulator.config import SimFleetConfig
from simulator.fleet import run_fleet
from tests.integration.simulator.conftest import pair_config

pytestmark = pytest.mark.integration
NAME = "sim-model"


def client(base_url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base_url + "/v1", api_key="unused", max_retries=0)


async def test_chat_stream_and_usage_chunk() -> None:
    fleet_config = SimFleetConfig(pairs=[pair_config(NAME)])
    async with run_fleet(fleet_config) as fleet, client(fleet.url(NAME)) as api:
        stream = await api.chat.completions.create(
            model=NAME,
            messages=[{"role": "user", "content": "Tell me a story"}],
            max_tokens=5,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in stream]
    ids = {c.id for c in chunks}
    assert len(ids) == 1
    assert ids.pop().startswith("chatcmpl-")
    assert {c.object for c in chunks} == {"chat.completion.chunk"}
    assert {c.model for c in chunks} == {NAME}
    first, *tokens, final = chunks
    assert first.choices[0].delta.role == "assistant"
    assert len(tokens) == 5
    assert all(len(c.choices) == 1 and c.choices[0].delta.content for c in tokens)
    assert [c.choices[0].finish_reason for c in tokens] == [None] * 4 + ["length"]
    assert final.choices == []
    assert final.usage is not None
    assert (final.usage.prompt_tokens, final.usage.completion_tokens) == (4, 5)
    assert final.usage.total_tokens == 9


async def test_completion_stream_without_usage() -> None:
    fleet_config = SimFleetConfig(pairs=[pair_config(NAME)])
    async with run_fleet(fleet_config) as fleet, client(fleet.url(NAME)) as api:
        stream = await api.completions.create(model=NAME, prompt="Once upon", stream=True)
        chunks = [chunk async for chunk in stream]
    assert len(chunks) == 16  # default_max_tokens, one token per chunk
    assert all(c.object == "text_completion" and c.usage is None for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "length"
    assert "".join(c.choices[0].text for c in chunks).startswith(" the quick")


async def test_non_stream_shapes_for_both_routes() -> None:
    fleet_config = SimFleetConfig(pairs=[pair_config(NAME, default_max_tokens=3)])
    async with run_fleet(fleet_config) as fleet, client(fleet.url(NAME)) as api:
        chat = await api.chat.completions.create(
            model=NAME, messages=[{"role": "user", "content": "hello"}]
        )
        text = await api.completions.create(model=NAME, prompt="hello", max_tokens=2)
    assert chat.object == "chat.completion"
    assert chat.id.startswith("chatcmpl-")
    assert chat.created > 0
    assert chat.choices[0].message.role == "assistant"
    assert chat.choices[0].message.content == " the quick brown"
    assert chat.usage is not None
    assert chat.usage.completion_tokens == 3
    assert text.object == "text_completion"
    assert text.id.startswith("cmpl-")
    assert text.choices[0].text == " the quick"
    assert text.choices[0].finish_reason == "length"
    assert text.usage is not None
    assert (text.usage.prompt_tokens, text.usage.completion_tokens) == (2, 2)


async def test_raw_sse_framing(http: aiohttp.ClientSession) -> None:
    fleet_config = SimFleetConfig(pairs=[pair_config(NAME)])
    async with run_fleet(fleet_config) as fleet:
        body = {"model": NAME, "prompt": "x", "max_tokens": 2, "stream": True}
        async with http.post(fleet.url(NAME) + "/v1/completions", json=body) as resp:
            assert resp.headers["Content-Type"].startswith("text/event-stream")
            raw = (await resp.read()).decode()
    events = raw.split("\n\n")
    assert events[-1] == ""
    assert events[-2] == "data: [DONE]"
    assert all(e.startswith("data: {") for e in events[:-2])
    assert len(events[:-2]) == 2
    assert json.loads(events[0].removeprefix("data: "))["choices"][0]["index"] == 0


async def test_models_health_and_errors(http: aiohttp.ClientSession) -> None:
    fleet_config = SimFleetConfig(pairs=[pair_config(NAME, context_length=64)])
    async with run_fleet(fleet_config) as fleet, client(fleet.url(NAME)) as api:
        url = fleet.url(NAME)
        models = await api.models.list()
        assert [m.id for m in models.data] == [NAME]
        async with http.get(url + "/v1/models") as resp:
            assert (await resp.json())["data"][0]["max_model_len"] == 64
        async with http.get(url + "/health") as resp:
            assert resp.status == 200
        with pytest.raises(openai.NotFoundError) as missing:
            await api.completions.create(model="other-model", prompt="x")
        assert missing.value.body == {
            "message": "The model `other-model` does not exist.",
            "type": "NotFoundError",
            "param": "model",
            "code": 404,
        }
        with pytest.raises(openai.BadRequestError, match="maximum context length"):
            await api.completions.create(model=NAME, prompt="x" * 200, max_tokens=20)
        async with http.post(url + "/v1/chat/completions", data=b'{"model": ') as resp:
            assert resp.status == 400
            assert (await resp.json())["error"]["type"] == "BadRequestError"
        stats = fleet.stats(NAME)
    assert stats.received == 3
    assert stats.completed == 0
    assert stats.last_request_body_bytes == len(b'{"model": ')


async def test_last_request_is_recorded(http: aiohttp.ClientSession) -> None:
    raw = b'{"model": "sim-model", "prompt": "x",  "max_tokens": 1, "user": "u1"}'
    async with run_fleet(SimFleetConfig(pairs=[pair_config(NAME)])) as fleet:
        assert fleet.last_request(NAME) is None
        headers = {"Content-Type": "application/json", "Traceparent": "00-abc-def-01"}
        async with http.post(fleet.url(NAME) + "/v1/completions", data=raw, headers=headers):
            pass
        last = fleet.last_request(NAME)
        async with http.get(fleet.url(NAME) + "/sim/last-request") as resp:
            over_http = await resp.json()
    assert last is not None
    assert (last.path, last.body) == ("/v1/completions", raw)
    assert last.headers["traceparent"] == "00-abc-def-01"
    assert over_http["body"] == raw.decode()
    assert over_http["headers"]["traceparent"] == "00-abc-def-01"


async def test_a_watcher_sees_each_request_on_arrival_with_what_the_engine_held(
    http: aiohttp.ClientSession,
) -> None:
    """`Engine.watch` (the admission bench follows requests to the engine by it): each
    generation request as it arrives, by its headers, with the requests the engine held then;
    none once the watcher is removed."""
    seen: list[tuple[str, float, int]] = []
    raw = b'{"model": "sim-model", "prompt": "x", "max_tokens": 1}'
    async with run_fleet(SimFleetConfig(pairs=[pair_config(NAME)])) as fleet:
        engine = fleet.engine(NAME)
        engine.watch(lambda req, at, held: seen.append((req.headers["x-request-id"], at, held)))
        for n in ("a", "b", "c"):
            if n == "c":
                engine.watch(None)
            headers = {"Content-Type": "application/json", "X-Request-Id": n}
            async with http.post(fleet.url(NAME) + "/v1/completions", data=raw, headers=headers):
                pass
    assert [(ident, held) for ident, _, held in seen] == [("a", 0), ("b", 0)]
    assert seen[0][1] <= seen[1][1]
