"""client: the timed streaming client against scripted OpenAI servers on loopback (error
events, vLLM's flat and nested error bodies, missing usage, chat answers)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from profiler.engine.client import EngineClient, RequestFailedError
from profiler.evals.accuracy import EvalItem
from tests.support.loopback import served

pytestmark = pytest.mark.integration

Script = Callable[[web.Request], Any]


@contextlib.asynccontextmanager
async def scripted(handler: Script, timeout_s: float = 5.0) -> AsyncIterator[EngineClient]:
    app = web.Application()
    app.router.add_post("/v1/completions", handler)
    app.router.add_post("/v1/chat/completions", handler)
    # handler_cancellation: a client that gives up cancels the handler, so cleanup is quick
    timeout = aiohttp.ClientTimeout(total=10, sock_connect=2, sock_read=5)
    async with (
        served(app, handler_cancellation=True) as url,
        aiohttp.ClientSession(timeout=timeout) as session,
    ):
        yield EngineClient(session, url, "m", request_timeout_s=timeout_s)


async def _sse(request: web.Request, events: list[Any], pause_s: float = 0.0) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    for event in events:
        data = event if isinstance(event, str) else json.dumps(event)
        await resp.write(f"data: {data}\n\n".encode())
        await asyncio.sleep(pause_s)
    await resp.write_eof()
    return resp


def _text(text: str) -> dict[str, Any]:
    return {"choices": [{"index": 0, "text": text}]}


async def test_stream_is_timed_per_chunk_with_usage() -> None:
    sent: list[dict[str, Any]] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        sent.append(await request.json())
        usage = {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}}
        return await _sse(request, [_text("a"), _text("b"), _text("c"), usage, "[DONE]"], 0.02)

    async with scripted(handler) as client:
        stream = await client.stream_completion("hello world", 3)
    body = sent[0]
    assert body["ignore_eos"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert (body["max_tokens"], body["model"], body["stream"]) == (3, "m", True)
    assert len(stream.token_times_s) == 3
    assert stream.started_s < stream.token_times_s[0] < stream.token_times_s[-1]
    assert stream.token_times_s[-1] - stream.token_times_s[0] >= 0.03  # two 20 ms pauses
    assert (stream.prompt_tokens, stream.completion_tokens, stream.prompt_chars) == (7, 3, 11)


async def test_stream_without_usage_and_role_only_first_chunk() -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        role = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
        token = {"choices": [{"index": 0, "delta": {"content": "x"}}]}
        return await _sse(request, [role, token, token, "[DONE]"])

    async with scripted(handler) as client:
        stream = await client.stream_completion("p", 2)
    assert len(stream.token_times_s) == 2  # the role chunk carries no token
    assert stream.completion_tokens is None


async def test_error_event_mid_stream_fails_the_request() -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        error = {"error": {"message": "engine died", "type": "server_error"}}
        return await _sse(request, [_text("a"), error])

    async with scripted(handler) as client:
        with pytest.raises(RequestFailedError, match="stream error: engine died"):
            await client.stream_completion("p", 4)


@pytest.mark.parametrize(
    "body",
    [
        {"error": {"message": "max_tokens is too large", "type": "BadRequestError"}},
        {"object": "error", "message": "max_tokens is too large", "code": 400},
    ],
)
async def test_http_errors_carry_the_engine_message(body: dict[str, Any]) -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.json_response(body, status=400)

    async with scripted(handler) as client:
        with pytest.raises(RequestFailedError, match="HTTP 400: max_tokens is too large"):
            await client.stream_completion("p", 4)


async def test_greedy_answers_for_prompt_and_chat_items() -> None:
    seen: list[tuple[str, dict[str, Any]]] = []

    async def handler(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append((request.path, body))
        if "messages" in body:
            return web.json_response({"choices": [{"message": {"content": " Paris"}}]})
        return web.json_response({"choices": [{"text": " 19"}]})

    prompt = EvalItem(prompt="12 + 7 =", expected=19, category="math", scorer="numeric")
    chat = EvalItem(
        messages=({"role": "user", "content": "Capital of France?"},),
        expected="Paris",
        category="chat",
        scorer="contains",
        max_tokens=4,
    )
    async with scripted(handler) as client:
        assert await client.complete(prompt) == " 19"
        assert await client.complete(chat) == " Paris"
    (path_a, body_a), (path_b, body_b) = seen
    assert (path_a, body_a["temperature"], body_a["max_tokens"]) == ("/v1/completions", 0.0, 16)
    assert path_b == "/v1/chat/completions"
    assert body_b["messages"] == [{"role": "user", "content": "Capital of France?"}]


async def test_a_stuck_stream_times_out_as_a_failed_request() -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        await asyncio.sleep(30)
        return resp

    async with scripted(handler, timeout_s=0.3) as client:
        with pytest.raises(RequestFailedError, match=r"no full answer in 0\.3s"):
            await client.stream_completion("p", 4)
