"""OTLP/HTTP export to a collector on loopback: the SDK's request bytes, sent the SDK's way."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.test_utils import TestServer
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.trace import SpanKind

from data_plane.telemetry.otlp import BATCH_SPANS, FastOTLPSpanExporter, OtlpPipeline
from data_plane.telemetry.span_pipelines import build_tracing
from data_plane.telemetry.tracing import Span, Tracing, readable

ServerFactory = Callable[[web.Application], Awaitable[TestServer]]
Received = list[tuple[str, str, bytes]]
RESOURCE = Resource.create({"service.name": "gearbox-test"})


async def collector(aiohttp_server: ServerFactory, status: int = 200) -> tuple[str, Received]:
    received: Received = []

    async def accept(request: web.Request) -> web.Response:
        received.append((request.path, request.content_type, await request.read()))
        return web.Response(status=status, body=b"", content_type="application/x-protobuf")

    app = web.Application()
    app.router.add_post("/v1/traces", accept)
    server = await aiohttp_server(app)
    return str(server.make_url("/v1/traces")), received


class Kept:
    def __init__(self) -> None:
        self.spans: list[Span] = []

    def finish(self, span: Span) -> None:
        self.spans.append(span)

    async def run(self) -> None:
        return

    def shutdown(self) -> None:
        return


def some_spans(odd: bool = False) -> list[Span]:
    kept = Kept()
    tracing = Tracing(kept)
    with tracing.request_span({}, "chat_completions"):
        attributes = {"gearbox.attempt": 1, "list": ["a"]} if odd else {"gearbox.attempt": 1}
        with tracing.span("gearbox.upstream", SpanKind.CLIENT, attributes):
            pass
    return kept.spans


def decoded(body: bytes) -> ExportTraceServiceRequest:
    request: ExportTraceServiceRequest = ExportTraceServiceRequest.FromString(body)
    return request


async def test_the_exporter_posts_the_sdk_request(aiohttp_server: ServerFactory) -> None:
    url, received = await collector(aiohttp_server)
    exporter = FastOTLPSpanExporter(url, RESOURCE)
    spans = some_spans()
    for odd in (False, True):  # the second batch goes through the SDK's own encoder
        spans = some_spans(odd)
        assert await asyncio.to_thread(exporter.export_spans, spans) is SpanExportResult.SUCCESS
        path, content_type, body = received[-1]
        assert (path, content_type) == ("/v1/traces", "application/x-protobuf")
        assert decoded(body) == encode_spans([readable(s, RESOURCE) for s in spans])
    exporter.shutdown()  # type: ignore[no-untyped-call]  # untyped in the SDK
    assert await asyncio.to_thread(exporter.export_spans, spans) is SpanExportResult.FAILURE
    assert len(received) == 2


async def test_a_refused_batch_is_a_failed_export(aiohttp_server: ServerFactory) -> None:
    url, received = await collector(aiohttp_server, status=400)
    exporter = FastOTLPSpanExporter(url, RESOURCE)
    assert await asyncio.to_thread(exporter.export_spans, some_spans()) is SpanExportResult.FAILURE
    assert len(received) == 1
    exporter.shutdown()  # type: ignore[no-untyped-call]


async def test_a_full_batch_is_sent_at_once_and_the_rest_on_shutdown(
    aiohttp_server: ServerFactory,
) -> None:
    url, received = await collector(aiohttp_server)
    pipeline = OtlpPipeline(url, RESOURCE)
    tracing = Tracing(pipeline)
    runner = asyncio.create_task(tracing.run())
    try:
        await asyncio.sleep(0)  # the runner is waiting
        for _ in range(BATCH_SPANS + 3):
            with tracing.span("gearbox.route"):
                pass
        for _ in range(200):
            if received:
                break
            await asyncio.sleep(0.01)
        assert len(decoded(received[0][2]).resource_spans[0].scope_spans[0].spans) == BATCH_SPANS
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
    await asyncio.to_thread(tracing.shutdown)
    assert len(decoded(received[-1][2]).resource_spans[0].scope_spans[0].spans) == 3


async def test_otlp_tracing_flushes_on_shutdown(aiohttp_server: ServerFactory) -> None:
    url, received = await collector(aiohttp_server)
    tracing = build_tracing("otlp", "gearbox-test", url)
    with tracing.request_span({}, "models"):
        pass
    await asyncio.to_thread(tracing.shutdown)
    (request,) = [decoded(body) for _, _, body in received]
    (resource_spans,) = request.resource_spans
    service = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
    assert service["service.name"] == "gearbox-test"
    (scope_spans,) = resource_spans.scope_spans
    assert scope_spans.scope.name == "gearbox.data_plane"
    assert [s.name for s in scope_spans.spans] == ["gearbox.request"]
