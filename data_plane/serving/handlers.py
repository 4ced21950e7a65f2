"""Thin aiohttp handlers: read and parse, call the proxy, render. No routing policy here."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping
from typing import Literal

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from data_plane.decision.explain import explain
from data_plane.decision.rollout import apply_rollout
from data_plane.domain import Candidate, CategoryDoubt, CompiledTable, RouteDecision
from data_plane.errors import AllUpstreamsUnavailable, PayloadTooLarge, RequestTimeout
from data_plane.request.body import parse_request_body, rewrite_model
from data_plane.request.budget import parse_budget
from data_plane.request.category import classification_json, doubt_reason, request_facts
from data_plane.serving.attempt import Call, CallState, ClientGoneError
from data_plane.serving.delivery import route_headers
from data_plane.serving.middleware import EXCHANGE
from data_plane.serving.proxy import Proxy
from data_plane.table_store import TableStore
from data_plane.telemetry.metrics import DataPlaneMetrics, RequestOutcome
from data_plane.telemetry.tracing import TRACE_HEADERS

Kind = Literal["chat", "completions"]
CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"


class AiohttpSink:
    """ClientSink over one aiohttp request: a whole Response, or a prepared stream."""

    __slots__ = ("_request", "_stream", "response")

    def __init__(self, request: web.Request) -> None:
        self._request = request
        self._stream: web.StreamResponse | None = None
        self.response: web.StreamResponse | None = None

    @property
    def started(self) -> bool:
        return self._stream is not None

    async def send(self, status: int, headers: Mapping[str, str], body: bytes) -> None:
        self.response = web.Response(status=status, body=body, headers=headers)

    async def start(self, status: int, headers: Mapping[str, str]) -> None:
        stream = web.StreamResponse(status=status, headers=headers)
        self._stream = self.response = stream
        try:
            await stream.prepare(self._request)
        except ConnectionResetError as err:
            raise ClientGoneError("client went away") from err

    async def write(self, chunk: bytes) -> None:
        if self._stream is None:
            raise RuntimeError("write before start")
        try:
            await self._stream.write(chunk)
        except ConnectionResetError as err:
            raise ClientGoneError("client went away") from err

    async def finish(self) -> None:
        if self._stream is not None:
            try:
                await self._stream.write_eof()
            except ConnectionResetError as err:
                raise ClientGoneError("client went away") from err


def _body_kind(raw: bytes) -> Kind:
    """/v1/route accepts either body: completions when it has a prompt and no messages."""
    try:
        doc = json.loads(raw)
    except ValueError:
        return "chat"  # parse_request_body names the JSON problem
    if isinstance(doc, dict) and "messages" not in doc and "prompt" in doc:
        return "completions"
    return "chat"


class Handlers:
    """The app's request handlers, bound to its store, proxy and metrics."""

    def __init__(
        self,
        store: TableStore,
        proxy: Proxy,
        metrics: DataPlaneMetrics,
        max_body_bytes: int,
        clock: Callable[[], float] = time.monotonic,
        body_read_timeout_s: float = 10.0,
    ) -> None:
        self._max_body_bytes = max_body_bytes
        self._body_read_timeout_s = body_read_timeout_s
        self._store = store
        self._proxy = proxy
        self._metrics = metrics
        self._clock = clock
        self._models: tuple[int, bytes] | None = None

    def routes(self) -> list[web.RouteDef]:
        return [
            web.post(CHAT_PATH, self.chat_completions, name="chat_completions"),
            web.post(COMPLETIONS_PATH, self.completions, name="completions"),
            web.get("/v1/models", self.models, name="models", allow_head=False),
            web.post("/v1/route", self.route, name="route"),
            web.get("/healthz", self.healthz, name="healthz", allow_head=False),
            web.get("/readyz", self.readyz, name="readyz", allow_head=False),
            web.get("/metrics", self.metrics, name="metrics", allow_head=False),
        ]

    def _table(self) -> CompiledTable:
        table = self._store.current
        if table is None:
            raise AllUpstreamsUnavailable("no routing table is loaded yet", retry_after_s=1.0)
        return table

    async def _read(self, request: web.Request) -> bytes:
        try:
            if request.content.is_eof():
                # The whole body came with the head (the usual small request): nothing to
                # wait for, so no read deadline to arm and cancel.
                return await request.read()
            async with asyncio.timeout(self._body_read_timeout_s):
                return await request.read()
        except TimeoutError as err:
            raise RequestTimeout(
                f"the request body did not arrive within {self._body_read_timeout_s:g} s"
            ) from err
        except web.HTTPRequestEntityTooLarge as err:
            raise PayloadTooLarge(
                f"the request body is larger than {self._max_body_bytes} bytes"
            ) from err

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._complete(request, "chat", CHAT_PATH)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._complete(request, "completions", COMPLETIONS_PATH)

    async def _complete(self, request: web.Request, kind: Kind, path: str) -> web.StreamResponse:
        started = self._clock()
        exchange = request[EXCHANGE]
        raw = await self._read(request)
        parsed = parse_request_body(raw, kind)
        budget = parse_budget(request.headers)
        table = self._table()
        facts = request_facts(parsed, table, budget)
        decision = self._proxy.decide(table, facts, budget)
        if facts.doubt is not None:
            self._metrics.count_abstention(facts.doubt.routed_as)
        call = Call(
            request_id=exchange.request_id,
            path=path,
            stream=parsed.stream,
            wants_json=parsed.wants_json,
            started_s=started,
            ttft_budget_s=decision.budget_ttft_s if parsed.stream else None,
            bodies=_bodies(raw),
            headers_for=_headers_for(decision, table.version, facts.doubt),
            state=CallState(),
            # Passed on as they are only while tracing is off (else our span's are sent).
            trace_headers={} if self._proxy.tracing_enabled else _trace_headers(request),
        )
        sink = AiohttpSink(request)
        try:
            exchange.outcome = await self._proxy.serve(call, table, decision, sink)
        except ClientGoneError:
            exchange.outcome = RequestOutcome.CANCELLED
        if sink.response is None:
            raise RuntimeError("the proxy finished without an answer")
        return sink.response

    async def route(self, request: web.Request) -> web.Response:
        """The decision for this body and these headers, explained; no engine is called."""
        raw = await self._read(request)
        parsed = parse_request_body(raw, _body_kind(raw))
        budget = parse_budget(request.headers)
        table = self._table()
        facts = request_facts(parsed, table, budget)
        result = self._proxy.route(table, facts, budget)
        if isinstance(result, RouteDecision):
            result = apply_rollout(result, table, self._proxy.draw())
        body = explain(result, table)
        body["classification"] = classification_json(facts, table)
        if facts.doubt is not None and "summary" in body:
            body["summary"] += (
                f" The classifier was unsure (top {facts.doubt.top} at "
                f"{facts.doubt.probability:.2f}); routed as {facts.doubt.routed_as}, the "
                f"strictest floor among {', '.join(facts.doubt.plausible)}."
            )
        return web.json_response(body)

    async def models(self, request: web.Request) -> web.Response:
        table = self._table()
        if self._models is None or self._models[0] != table.version:
            self._models = (table.version, _models_body(table, int(self._store.created_at_s)))
        return web.Response(body=self._models[1], content_type="application/json")

    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(self, request: web.Request) -> web.Response:
        version = self._store.version
        return web.json_response(
            {"ready": version is not None, "table_version": version},
            status=200 if version is not None else 503,
        )

    async def metrics(self, request: web.Request) -> web.Response:
        body = generate_latest(self._metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


def _trace_headers(request: web.Request) -> dict[str, str]:
    """The client's W3C trace context headers, if it sent sane ones."""
    found: dict[str, str] = {}
    for name in TRACE_HEADERS:
        value = request.headers.get(name)
        if value is not None and len(value) <= 512 and value.isascii():
            found[name] = value
    return found


def _bodies(raw: bytes) -> Callable[[str], bytes]:
    """served model name -> the client's body with only `model` rewritten (memoised)."""
    cache: dict[str, bytes] = {}

    def body_for(served_model_name: str) -> bytes:
        body = cache.get(served_model_name)
        if body is None:
            body = cache[served_model_name] = rewrite_model(raw, served_model_name)
        return body

    return body_for


def _headers_for(
    decision: RouteDecision, version: int, doubt: CategoryDoubt | None
) -> Callable[[Candidate, int], dict[str, str]]:
    def headers_for(cand: Candidate, attempts: int) -> dict[str, str]:
        headers = route_headers(decision, version, cand, attempts)
        if doubt is not None:
            headers["X-Route-Reason"] += doubt_reason(doubt)
        return headers

    return headers_for


def _models_body(table: CompiledTable, created: int) -> bytes:
    """OpenAI's model list: `auto`, every family, every pair."""
    ids = ["auto", *dict.fromkeys(p.family for p in table.pairs), *(p.pair for p in table.pairs)]
    data = [{"id": i, "object": "model", "created": created, "owned_by": "gearbox"} for i in ids]
    return json.dumps({"object": "list", "data": data}).encode()
