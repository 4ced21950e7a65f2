"""The HTTP face of one simulated engine: vLLM's OpenAI routes plus `/sim/*` controls.

Thin: parse, ask the engine, render. A client that goes away (handler cancelled, or a write to
a closed connection) is counted as cancelled and its slot is given back by the engine.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from simulator.completion import CompletionPlan
from simulator.config import FaultConfig, format_loc
from simulator.engine import Engine, FaultDraw, ReceivedRequest
from simulator.openai_request import ApiError, RequestFacts, Route, parse_request
from simulator.openai_response import (
    SSE_DONE,
    ResponseIdentity,
    full_response,
    sse,
    token_chunk,
    usage,
    usage_chunk,
)
from simulator.scheduler import Ticket

ENGINE = web.AppKey("engine", Engine)
FaultsSetter = Callable[[FaultConfig], None]
ON_FAULTS: web.AppKey[FaultsSetter] = web.AppKey("on_faults")
MAX_BODY_BYTES = 64 * 1024 * 1024


class _BrokenStreamError(Exception):
    """Injected fault: the connection is dropped in the middle of the response."""


def _error(err: ApiError) -> web.Response:
    return web.json_response(err.body(), status=err.status)


async def _hang_forever() -> None:
    """Injected hang: never answer; returns only by cancellation (client gone or shutdown)."""
    await asyncio.Event().wait()


def _admit(engine: Engine, facts: RequestFacts, draw: FaultDraw) -> Ticket:
    if draw.error:
        status = engine.faults.error_status
        raise ApiError(status, f"Simulated engine failure (injected fault, status {status}).")
    return engine.enqueue()


async def _generate(request: web.Request, route: Route) -> web.StreamResponse:
    engine = request.app[ENGINE]
    raw = await request.read()
    headers = {k.lower(): v for k, v in request.headers.items()}
    engine.record(ReceivedRequest(request.path, headers, raw))
    try:
        try:
            facts = parse_request(route, raw, engine.config)
            draw = engine.draw_faults()
            if draw.hang and not draw.error:
                await _hang_forever()
            ticket = _admit(engine, facts, draw)
        except ApiError as err:
            return _error(err)
        try:
            plan = engine.plan(facts)
            if facts.stream:
                return await _stream(request, engine, ticket, facts, plan, draw)
            return await _whole(request, engine, ticket, facts, plan, draw)
        finally:
            ticket.close()
    except (asyncio.CancelledError, ConnectionResetError):
        engine.counters.cancelled += 1
        raise


async def _whole(
    request: web.Request,
    engine: Engine,
    ticket: Ticket,
    facts: RequestFacts,
    plan: CompletionPlan,
    draw: FaultDraw,
) -> web.StreamResponse:
    async def keep(index: int, token: str) -> None:
        return None

    await engine.generate(ticket, facts, plan, draw.slow_first_token_s, keep)
    ident = ResponseIdentity.new(facts.route, int(time.time()), engine.config.name)
    used = usage(facts.prompt_tokens, len(plan.tokens))
    body = json.dumps(full_response(ident, plan.text, plan.finish_reason, used)).encode()
    stall = engine.faults.stall_after_chunks is not None
    if not draw.break_stream and not stall:
        engine.counters.completed += 1
        return web.Response(body=body, content_type="application/json")
    resp = web.StreamResponse(headers={"Content-Type": "application/json"})
    resp.content_length = len(body)
    await resp.prepare(request)
    await resp.write(body[: len(body) // 2])
    if stall:
        await _hang_forever()
    return _drop(request, engine, resp)


def _drop(request: web.Request, engine: Engine, resp: web.StreamResponse) -> web.StreamResponse:
    """Abort the connection mid-response (no [DONE], no chunked terminator)."""
    engine.counters.streams_broken += 1
    if request.transport is not None:
        request.transport.abort()
    return resp


async def _stream(
    request: web.Request,
    engine: Engine,
    ticket: Ticket,
    facts: RequestFacts,
    plan: CompletionPlan,
    draw: FaultDraw,
) -> web.StreamResponse:
    resp = web.StreamResponse(
        headers={"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
    )
    await resp.prepare(request)  # headers go out at once, like vLLM; tokens follow
    ident = ResponseIdentity.new(facts.route, int(time.time()), engine.config.name)
    last = len(plan.tokens) - 1
    break_at = engine.faults.break_after_chunks if draw.break_stream else None

    stall_at = engine.faults.stall_after_chunks

    async def write(index: int, token: str) -> None:
        if index == break_at:
            raise _BrokenStreamError
        if index == stall_at:
            await _hang_forever()
        if index == 0 and facts.route is Route.CHAT:
            await resp.write(sse(token_chunk(ident, "", None, role=True)))
        finish = plan.finish_reason if index == last else None
        await resp.write(sse(token_chunk(ident, token, finish)))

    try:
        await engine.generate(ticket, facts, plan, draw.slow_first_token_s, write)
        if break_at is not None:
            raise _BrokenStreamError
    except _BrokenStreamError:
        return _drop(request, engine, resp)
    await _finish_stream(resp, ident, facts, plan)
    engine.counters.completed += 1
    return resp


async def _finish_stream(
    resp: web.StreamResponse, ident: ResponseIdentity, facts: RequestFacts, plan: CompletionPlan
) -> None:
    if not plan.tokens:  # the answer was empty: one chunk carries the finish reason
        await resp.write(sse(token_chunk(ident, "", plan.finish_reason, role=True)))
    if facts.include_usage:
        await resp.write(sse(usage_chunk(ident, usage(facts.prompt_tokens, len(plan.tokens)))))
    await resp.write(SSE_DONE)
    await resp.write_eof()


async def completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, Route.COMPLETIONS)


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, Route.CHAT)


async def models(request: web.Request) -> web.Response:
    config = request.app[ENGINE].config
    card = {
        "id": config.name,
        "object": "model",
        "created": int(time.time()),
        "owned_by": "vllm",
        "root": config.name if config.tokenizer is None else str(config.tokenizer.parent),
        "parent": None,
        "max_model_len": config.context_length,
    }
    return web.json_response({"object": "list", "data": [card]})


async def health(request: web.Request) -> web.Response:
    return web.Response(status=200)


async def version(request: web.Request) -> web.Response:
    return web.json_response({"version": "gearbox-simulator"})


async def metrics(request: web.Request) -> web.Response:
    body = request.app[ENGINE].metrics.render()
    return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4"})


async def sim_stats(request: web.Request) -> web.Response:
    return web.json_response(request.app[ENGINE].stats().to_dict())


async def sim_last_request(request: web.Request) -> web.Response:
    last = request.app[ENGINE].last_request
    return web.json_response(last.to_dict() if last is not None else None)


async def sim_reset(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    engine.reset()
    request.app[ON_FAULTS](engine.faults)
    return web.json_response(engine.stats().to_dict())


async def sim_faults(request: web.Request) -> web.Response:
    try:
        data: Any = json.loads(await request.read())
        faults = FaultConfig.model_validate(data)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as err:
        return _error(ApiError(400, f"body is not valid JSON: {err}"))
    except ValidationError as err:
        first = err.errors()[0]
        where = format_loc(tuple(first["loc"]))
        return _error(ApiError(400, f"{where}: {first['msg']}", param=where))
    request.app[ON_FAULTS](faults)
    return web.json_response(faults.model_dump())


def create_app(engine: Engine, on_faults: Callable[[FaultConfig], None]) -> web.Application:
    """The aiohttp app of one pair; `on_faults` applies new faults (and refuses connections)."""
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app[ENGINE] = engine
    app[ON_FAULTS] = on_faults
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_get("/version", version)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/sim/stats", sim_stats)
    app.router.add_get("/sim/last-request", sim_last_request)
    app.router.add_post("/sim/faults", sim_faults)
    app.router.add_post("/sim/reset", sim_reset)
    return app
