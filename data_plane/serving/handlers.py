"""Thin aiohttp handlers: read and parse, call the proxy, render. No routing policy here."""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable, Mapping

from aiohttp import web
from pydantic import SecretStr

from data_plane.asked import Full
from data_plane.decision_step import DecisionStep
from data_plane.domain import Candidate, CompiledTable
from data_plane.errors import ModelNotFound, PayloadTooLarge, RequestTimeout, RouterError
from data_plane.flow.queue import FlowQueue
from data_plane.prompt_counter import PromptCounter
from data_plane.request.body import BodyKind
from data_plane.request.identity import PRIORITY_APPLIED, TENANT_APPLIED
from data_plane.request.prompt_tokens import PromptCount
from data_plane.serving.attempt import ClientGoneError
from data_plane.serving.lifecycle import Request
from data_plane.serving.middleware import REQUEST, REQUEST_ID_HEADER
from data_plane.serving.openapi import build_openapi, with_models
from data_plane.serving.probes import Probes
from data_plane.serving.proxy import Proxy
from data_plane.serving.route_headers import QUEUED_HEADER, route_headers
from data_plane.table_store import TableStore
from data_plane.telemetry.metrics import DataPlaneMetrics, RequestOutcome
from data_plane.telemetry.tracing import TRACE_HEADERS

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
        """Write the whole answer now: the bookkeeping after it (accounting, spans, request
        metrics) then runs while the client reads it, not before it is sent (docs/data_plane.md,
        "What happens to a request"); aiohttp's own send after the handler finds it done."""
        response = web.Response(status=status, body=body, headers=headers)
        self.response = response
        try:
            await response.prepare(self._request)
            await response.write_eof()
        except ConnectionResetError as err:
            raise ClientGoneError("client went away") from err

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


class Handlers:
    """The app's request handlers, bound to its store, decision step, proxy and metrics."""

    def __init__(
        self,
        store: TableStore,
        step: DecisionStep,
        proxy: Proxy,
        metrics: DataPlaneMetrics,
        max_body_bytes: int,
        version: str,
        clock: Callable[[], float] = time.monotonic,
        body_read_timeout_s: float = 10.0,
        open_api: bool = True,
        identity: tuple[str, Callable[[], list[str]]] = ("", list),
        metrics_token: SecretStr | None = None,
        flow: FlowQueue | None = None,
        counter: PromptCounter | None = None,
    ) -> None:
        self._max_body_bytes = max_body_bytes
        self._counter = counter  # large prompts' tokens by the alias's tokenizer
        self._flow = flow  # the queue a request every pair is full for waits in
        self._body_read_timeout_s = body_read_timeout_s
        self._store = store
        self._step = step
        self._proxy = proxy
        self._probes = Probes(store, metrics, identity, metrics_token)
        self._version = version  # of the OpenAPI document
        self._clock = clock
        self._models: tuple[int, bytes, dict[str, dict[str, object]]] | None = None
        self._openapi: dict[int | None, bytes] = {}  # table version -> document
        # /openapi.json needs no key: it lists the table's model ids only when /v1/ needs
        # none either (else they are for key holders, through /v1/models).
        self._ids_in_openapi = open_api

    def routes(self) -> list[web.RouteDef]:
        return [
            web.post(CHAT_PATH, self.chat_completions, name="chat_completions"),
            web.post(COMPLETIONS_PATH, self.completions, name="completions"),
            web.get("/v1/models", self.models, name="models", allow_head=False),
            web.get("/v1/models/{model:.+}", self.model, name="model", allow_head=False),
            web.post("/v1/route", self.route, name="route"),
            *self._probes.routes(),
            web.get("/openapi.json", self.openapi, name="openapi", allow_head=False),
        ]

    async def _read(self, request: web.Request) -> bytes:
        content = request.content
        if content.is_eof():
            # The whole body came with the head (the usual small request): taken from the
            # buffer at once, no read deadline to arm and cancel, no read loop to await.
            body = content.read_nowait()
            if len(body) > self._max_body_bytes:
                raise PayloadTooLarge(
                    f"the request body is larger than {self._max_body_bytes} bytes"
                )
            return body
        try:
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

    async def _complete(
        self, request: web.Request, kind: BodyKind, path: str
    ) -> web.StreamResponse:
        arrived = asyncio.get_running_loop().time()
        raw = await self._read(request)
        counted = await self._counted(raw) if self._counts(raw) else None
        # Decided, it holds its tenant's share and a slot until the middleware finishes it
        # (`lifecycle.Finish`), answered, failed or cancelled.
        await self._decide(request[REQUEST], raw, kind, request, arrived, counted)
        return await self._serve(request, self._clock(), path)

    def _counts(self, raw: bytes) -> bool:
        """Whether `raw`'s prompt is counted by its alias's tokenizer (no coroutine when not)."""
        counter = self._counter
        return counter is not None and counter.counts(raw, self._store.current)

    async def _counted(self, raw: bytes) -> PromptCount | None:
        """`raw`'s prompt tokens by its alias's tokenizer (`PromptCounter.count`)."""
        counter = self._counter
        return None if counter is None else await counter.count(raw, self._store.current)

    async def _decide(
        self,
        req: Request,
        raw: bytes,
        kind: BodyKind,
        request: web.Request,
        arrived: float,
        counted: PromptCount | None = None,
    ) -> None:
        """`req` decided, after a wait in the queue when every pair is full (`flow.queue`)."""
        if self._flow is None:
            self._step.decide(req, raw, kind, request.headers, counted=counted)
            return
        try:
            self._step.decide(req, raw, kind, request.headers, True, self._flow, counted)
        except Full as full:
            await self._flow.wait(req, full, arrived)

    async def _serve(
        self, request: web.Request, dispatched: float, path: str
    ) -> web.StreamResponse:
        """Serve the decided request (`dispatched`: when it was decided, on the clock its
        start was read on, the app's)."""
        req = request[REQUEST]
        inbound, decision = req.inbound, req.decision
        facts = inbound.facts
        stream = facts.stream
        sink = AiohttpSink(request)
        req.sends(
            path,
            sink,
            inbound.body_for,
            _headers_for(req),
            stream=stream,
            wants_json=facts.wants_json,
            ttft_budget_s=decision.budget_ttft_s if stream else None,
            # Passed on as they are only while tracing is off (else our span's are sent).
            trace_headers={} if self._proxy.tracing_enabled else _trace_headers(request),
            max_tokens=facts.max_output_tokens,
            dispatched_s=dispatched,
        )
        if req.slot is not None:
            # The first attempt takes its own place in the in-flight count before the proxy
            # first yields to the loop: nothing else is decided in between.
            req.slot.free()
        try:
            req.outcome = await self._proxy.serve(req)
        except ClientGoneError:
            req.outcome = RequestOutcome.CANCELLED
        except RouterError as err:
            err.engines_tried = req.attempts > 0
            raise
        if sink.response is None:
            raise RuntimeError("the proxy finished without an answer")
        return sink.response

    async def route(self, request: web.Request) -> web.Response:
        """The decision for this body and these headers, explained; no engine is called."""
        raw = await self._read(request)
        counted = await self._counted(raw) if self._counts(raw) else None
        return web.json_response(self._step.explain(raw, request.headers, counted))

    def _model_list(self) -> tuple[int, bytes, dict[str, dict[str, object]]]:
        """(table version, the list's body, the model objects by id), built once per table."""
        table = self._step.table()
        if self._models is None or self._models[0] != table.version:
            objects = _model_objects(table, int(self._store.created_at_s))
            body = json.dumps({"object": "list", "data": list(objects.values())}).encode()
            self._models = (table.version, body, objects)
        return self._models

    async def models(self, request: web.Request) -> web.Response:
        return web.Response(body=self._model_list()[1], content_type="application/json")

    async def model(self, request: web.Request) -> web.Response:
        """One model object (the SDK's `models.retrieve`); 404 model_not_found otherwise."""
        name = request.match_info["model"]
        found = self._model_list()[2].get(name)
        if found is None:
            raise ModelNotFound(f"model {name[:200]!r} is not served", param=None)
        return web.json_response(found)

    async def openapi(self, request: web.Request) -> web.Response:
        """This API's OpenAPI document, generated from the routes and models; the loaded
        table's model ids are listed as known `model` values."""
        version = self._store.version
        body = self._openapi.get(version)
        if body is None:
            doc = build_openapi(self.routes(), self._version)
            if self._ids_in_openapi and self._store.current is not None:
                doc = with_models(doc, list(self._model_list()[2]))
            body = json.dumps(doc).encode()
            self._openapi = {version: body}
        return web.Response(body=body, content_type="application/json")


def _trace_headers(request: web.Request) -> dict[str, str]:
    """The client's W3C trace context headers, if it sent sane ones."""
    found: dict[str, str] = {}
    for name in TRACE_HEADERS:
        value = request.headers.get(name)
        if value is not None and len(value) <= 512 and value.isascii():
            found[name] = value
    return found


def _headers_for(req: Request) -> Callable[[Candidate, int], dict[str, str]]:
    """The X-Route-* headers of an answer, the class and tenant label it was served as
    (`X-Gearbox-Priority`, `X-Gearbox-Tenant`), X-Request-Id (a stream's head goes out
    before the middleware sees the response), and for a request that waited in the queue,
    `X-Route-Queued-Ms` (its wait, whole milliseconds rounded up)."""
    decision, version, request_id = req.decision, req.table.version, req.id
    doubt = req.inbound.facts.doubt
    applied = {PRIORITY_APPLIED: req.priority, TENANT_APPLIED: req.tenant}
    if req.queued_s > 0.0:
        applied[QUEUED_HEADER] = str(math.ceil(req.queued_s * 1000))

    def headers_for(cand: Candidate, attempts: int) -> dict[str, str]:
        headers = route_headers(decision, version, cand, attempts, doubt)
        headers[REQUEST_ID_HEADER] = request_id
        headers.update(applied)
        return headers

    return headers_for


def _model_objects(table: CompiledTable, created: int) -> dict[str, dict[str, object]]:
    """OpenAI's model objects for `auto`, every family and every pair, in that order. Like
    vLLM's, each has `max_model_len`: the largest context among the pairs the id may route to
    (a longer request answers 400 context_length_exceeded)."""
    ids = ["auto", *dict.fromkeys(p.family for p in table.pairs), *(p.pair for p in table.pairs)]
    return {
        i: {
            "id": i,
            "object": "model",
            "created": created,
            "owned_by": "gearbox",
            "max_model_len": max(p.context_length for p in table.by_alias[i]),
        }
        for i in ids
    }
