"""OTLP/HTTP export to a collector on loopback: the SDK's request bytes, posted our way; a bad
span dropped and counted while the rest goes out; retries, headers and gzip."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.test_utils import TestServer
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.trace import SpanKind

from data_plane.telemetry.metrics import DataPlaneMetrics
from data_plane.telemetry.otlp import BATCH_SPANS, OnDropped, OtlpPipeline
from data_plane.telemetry.otlp_http import OtlpSender, OtlpTarget
from data_plane.telemetry.span_pipelines import build_tracing
from data_plane.telemetry.tracing import Span, Tracing, readable
from data_plane.upstream.collector_post import CollectorPost
from tests.support.redis_server import free_port

ServerFactory = Callable[[web.Application], Awaitable[TestServer]]
Received = list[tuple[str, str, bytes, dict[str, str]]]
RESOURCE = Resource.create({"service.name": "gearbox-test"})


async def collector(aiohttp_server: ServerFactory, *statuses: int) -> tuple[str, Received]:
    """A collector answering `statuses` in turn (then 200); records every post."""
    received: Received = []
    answers = list(statuses)

    async def accept(request: web.Request) -> web.Response:
        body = await request.read()
        received.append((request.path, request.content_type, body, dict(request.headers)))
        status = answers.pop(0) if answers else 200
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

    async def shutdown(self) -> None:
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


def span_names(body: bytes) -> list[str]:
    return [s.name for s in decoded(body).resource_spans[0].scope_spans[0].spans]


class Drops:
    def __init__(self) -> None:
        self.counted: list[tuple[str, int]] = []

    def __call__(self, reason: str, count: int) -> None:
        self.counted.append((reason, count))


def pipeline_to(
    url: str,
    on_dropped: OnDropped | None = None,
    headers: dict[str, str] | None = None,
    gzip: bool = False,
) -> OtlpPipeline:
    sender = OtlpSender(OtlpTarget(url, headers or {}, 5.0, gzip))
    return OtlpPipeline(sender, RESOURCE, on_dropped)


async def test_the_pipeline_posts_the_sdk_request(aiohttp_server: ServerFactory) -> None:
    url, received = await collector(aiohttp_server)
    pipeline = pipeline_to(url)
    for odd in (False, True):  # the odd span goes through the SDK's own encoder
        spans = some_spans(odd)
        assert await pipeline.send(spans) == (0, 0)
        path, content_type, body, _ = received[-1]
        assert (path, content_type) == ("/v1/traces", "application/x-protobuf")
        assert decoded(body) == encode_spans([readable(s, RESOURCE) for s in spans])
    await pipeline.shutdown()
    assert await pipeline.send(some_spans()) == (0, 2)  # closed
    assert len(received) == 2


async def test_a_refused_batch_is_dropped_and_counted_busy_is_retried(
    aiohttp_server: ServerFactory,
) -> None:
    url, received = await collector(aiohttp_server, 400, 503)
    drops = Drops()
    pipeline = pipeline_to(url, drops)
    assert await pipeline.send(some_spans()) == (0, 2)  # 400: not retried
    assert len(received) == 1
    assert await pipeline.send(some_spans()) == (0, 0)  # 503, then 200
    assert len(received) == 3
    assert drops.counted == []  # `send` reports; `post` (the export loop's) counts
    await pipeline.shutdown()


async def test_headers_and_gzip_from_settings(aiohttp_server: ServerFactory) -> None:
    url, received = await collector(aiohttp_server)
    pipeline = pipeline_to(url, headers={"x-api-key": "k 1"}, gzip=True)
    spans = some_spans()
    assert await pipeline.send(spans) == (0, 0)
    _, _, body, sent = received[0]
    headers = {name.lower(): value for name, value in sent.items()}
    assert (headers["content-encoding"], headers["x-api-key"]) == ("gzip", "k 1")
    # aiohttp inflated the body: it was gzip on the wire
    assert decoded(body) == encode_spans([readable(s, RESOURCE) for s in spans])
    await pipeline.shutdown()


async def test_a_span_that_will_not_encode_is_dropped_counted_and_export_goes_on(
    aiohttp_server: ServerFactory,
) -> None:
    url, received = await collector(aiohttp_server)
    metrics = DataPlaneMetrics("0", "sha")
    pipeline = pipeline_to(url, metrics.count_dropped_spans)
    tracing = Tracing(pipeline)
    runner = asyncio.create_task(tracing.run())
    try:
        await asyncio.sleep(0)  # the runner is waiting
        for batch in range(2):
            with tracing.span("bad", attributes={"gearbox.pair": "lone \ud800 surrogate"}):
                pass
            with tracing.span("bad-name-\udfff"):
                pass
            for _ in range(BATCH_SPANS):  # a bad span never takes a place in a batch
                with tracing.span("gearbox.route"):
                    pass
            for _ in range(300):
                if len(received) > batch:
                    break
                await asyncio.sleep(0.01)
            names = span_names(received[batch][2])
            assert names == ["gearbox.route"] * BATCH_SPANS
        assert not runner.done()  # the export task lives on (it died here before)
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
    assert metrics.spans_dropped.labels("unencodable").value == 4
    assert metrics.spans_dropped.labels("export_failed").value == 0
    await tracing.shutdown()


async def test_a_full_batch_is_sent_at_once_and_the_rest_on_shutdown(
    aiohttp_server: ServerFactory,
) -> None:
    url, received = await collector(aiohttp_server)
    tracing = Tracing(pipeline_to(url))
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
        assert len(span_names(received[0][2])) == BATCH_SPANS
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
    await tracing.shutdown()
    assert len(span_names(received[-1][2])) == 3


async def test_otlp_tracing_flushes_on_shutdown(aiohttp_server: ServerFactory) -> None:
    url, received = await collector(aiohttp_server)
    attributes = {"deployment.environment": "test", "service.name": "not ours"}
    tracing = build_tracing("otlp", "gearbox-test", OtlpTarget(url), resource_attributes=attributes)
    with tracing.request_span({}, "models"):
        pass
    await tracing.shutdown()
    (request,) = [decoded(body) for _, _, body, _ in received]
    (resource_spans,) = request.resource_spans
    service = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
    assert service["service.name"] == "gearbox-test"
    assert service["deployment.environment"] == "test"
    assert service["telemetry.sdk.name"] == "opentelemetry"
    (scope_spans,) = resource_spans.scope_spans
    assert scope_spans.scope.name == "gearbox.data_plane"
    assert [s.name for s in scope_spans.spans] == ["gearbox.request"]


async def test_a_post_under_way_when_export_stops_is_finished_by_shutdown(
    aiohttp_server: ServerFactory,
) -> None:
    received: Received = []
    arrived = asyncio.Event()

    async def slow(request: web.Request) -> web.Response:
        body = await request.read()
        arrived.set()
        await asyncio.sleep(0.3)
        received.append((request.path, request.content_type, body, dict(request.headers)))
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post("/v1/traces", slow)
    server = await aiohttp_server(app)
    drops = Drops()
    tracing = Tracing(pipeline_to(str(server.make_url("/v1/traces")), drops))
    runner = asyncio.create_task(tracing.run())
    await asyncio.sleep(0)  # the runner is waiting
    for _ in range(BATCH_SPANS):
        with tracing.span("gearbox.upstream"):
            pass
    await asyncio.wait_for(arrived.wait(), 5)
    runner.cancel()  # the app's cleanup stops the export loop mid-post
    await asyncio.gather(runner, return_exceptions=True)
    await tracing.shutdown()
    assert [len(span_names(body)) for _, _, body, _ in received] == [BATCH_SPANS]
    assert drops.counted == []


async def test_the_data_planes_own_client_posts_retries_and_fails_like_aiohttps(
    aiohttp_server: ServerFactory,
) -> None:
    """The app posts through `CollectorPost` (the lean HTTP/1.1 client): same bytes and
    headers, a retry on 503, none on 400, a refused connection is a failed export."""

    def through_ours(url: str) -> OtlpPipeline:
        sender = OtlpSender(OtlpTarget(url, {"x-api-key": "k"}, 2.0), CollectorPost())
        return OtlpPipeline(sender, RESOURCE)

    url, received = await collector(aiohttp_server, 503)
    pipeline = through_ours(url)
    spans = some_spans()
    assert await pipeline.send(spans) == (0, 0)  # 503, then 200
    assert len(received) == 2
    path, content_type, body, sent = received[-1]
    assert (path, content_type) == ("/v1/traces", "application/x-protobuf")
    assert {k.lower(): v for k, v in sent.items()}["x-api-key"] == "k"
    assert decoded(body) == encode_spans([readable(s, RESOURCE) for s in spans])
    await pipeline.shutdown()

    url, received = await collector(aiohttp_server, 400)
    pipeline = through_ours(url)
    assert await pipeline.send(some_spans()) == (0, 2)  # 400: not retried
    assert len(received) == 1
    await pipeline.shutdown()

    pipeline = through_ours(f"http://127.0.0.1:{free_port()}/v1/traces")
    assert await pipeline.send(some_spans()) == (0, 2)  # refused, retried until the timeout
    await pipeline.shutdown()
