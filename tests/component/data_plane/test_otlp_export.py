"""OTLP/HTTP export to a collector on loopback: the bytes are the SDK's request, sent its way."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.test_utils import TestServer
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from data_plane.otlp import FastOTLPSpanExporter
from data_plane.tracing import build_tracing

ServerFactory = Callable[[web.Application], Awaitable[TestServer]]
Received = list[tuple[str, str, bytes]]


async def collector(aiohttp_server: ServerFactory, status: int = 200) -> tuple[str, Received]:
    received: Received = []

    async def accept(request: web.Request) -> web.Response:
        received.append((request.path, request.content_type, await request.read()))
        return web.Response(status=status, body=b"", content_type="application/x-protobuf")

    app = web.Application()
    app.router.add_post("/v1/traces", accept)
    server = await aiohttp_server(app)
    return str(server.make_url("/v1/traces")), received


def some_spans(odd: bool = False) -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    tracing = build_tracing("none", "gearbox-test", span_exporter=exporter)
    with tracing.request_span({}, "chat_completions"):
        attributes = {"gearbox.attempt": 1, "list": ["a"]} if odd else {"gearbox.attempt": 1}
        with tracing.span("gearbox.upstream", SpanKind.CLIENT, attributes):
            pass
    return exporter


async def test_the_exporter_posts_the_sdk_request(aiohttp_server: ServerFactory) -> None:
    url, received = await collector(aiohttp_server)
    exporter = FastOTLPSpanExporter(endpoint=url)
    spans = some_spans().get_finished_spans()
    for odd in (False, True):  # the second batch goes through the SDK's own encoder
        spans = some_spans(odd).get_finished_spans()
        assert await asyncio.to_thread(exporter.export, spans) is SpanExportResult.SUCCESS
        path, content_type, body = received[-1]
        assert (path, content_type) == ("/v1/traces", "application/x-protobuf")
        assert ExportTraceServiceRequest.FromString(body) == encode_spans(spans)
    exporter.shutdown()  # type: ignore[no-untyped-call]  # untyped in the SDK
    assert await asyncio.to_thread(exporter.export, spans) is SpanExportResult.FAILURE
    assert len(received) == 2


async def test_a_refused_batch_is_a_failed_export(aiohttp_server: ServerFactory) -> None:
    url, received = await collector(aiohttp_server, status=400)
    exporter = FastOTLPSpanExporter(endpoint=url)
    spans = some_spans().get_finished_spans()
    assert await asyncio.to_thread(exporter.export, spans) is SpanExportResult.FAILURE
    assert len(received) == 1
    exporter.shutdown()  # type: ignore[no-untyped-call]  # untyped in the SDK


async def test_otlp_tracing_flushes_its_batch_on_shutdown(aiohttp_server: ServerFactory) -> None:
    url, received = await collector(aiohttp_server)
    tracing = build_tracing("otlp", "gearbox-test", url)
    with tracing.request_span({}, "models"):
        pass
    await asyncio.to_thread(tracing.shutdown)
    (request,) = [ExportTraceServiceRequest.FromString(body) for _, _, body in received]
    (resource_spans,) = request.resource_spans
    service = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
    assert service["service.name"] == "gearbox-test"
    (scope_spans,) = resource_spans.scope_spans
    assert scope_spans.scope.name == "gearbox.data_plane"
    assert [s.name for s in scope_spans.spans] == ["gearbox.request"]
