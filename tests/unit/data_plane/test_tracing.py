"""tracing.py + otlp.py + sampling.py: lean spans with the SDK's semantics (its samplers' decisions
included); the SDK's bytes, encoded lean; spans that will not encode left out."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ALWAYS_ON,
    Decision,
    ParentBased,
    TraceIdRatioBased,
)
from opentelemetry.sdk.trace.sampling import (
    Sampler as SdkSampler,
)
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    StatusCode,
    TraceFlags,
    set_span_in_context,
)

from data_plane.telemetry.otlp import Encoder, OtlpPipeline, UnsupportedError
from data_plane.telemetry.otlp_http import OtlpSender, OtlpTarget
from data_plane.telemetry.sampling import Sampler
from data_plane.telemetry.span_pipelines import build_tracing
from data_plane.telemetry.tracing import NO_SPAN, Span, Tracing, readable

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def recording() -> tuple[Tracing, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    return build_tracing("none", "gearbox-test", span_exporter=exporter), exporter


def by_name(spans: Sequence[ReadableSpan]) -> dict[str, ReadableSpan]:
    return {s.name: s for s in spans}


def test_request_route_and_attempt_spans_nest_under_the_client_trace() -> None:
    tracing, exporter = recording()
    headers = {"traceparent": PARENT, "tracestate": "vendor=abc"}
    with tracing.request_span(headers, "chat_completions") as request:
        with tracing.span("gearbox.route"):
            pass
        current = tracing.current()
        assert current is request
        current.set_attribute("gearbox.reason", "cheapest_feasible")
        with tracing.span("gearbox.upstream", SpanKind.CLIENT, {"gearbox.attempt": 1}) as up:
            carrier: dict[str, str] = {}
            tracing.inject(carrier, up, headers)
            up.set_attribute("gearbox.outcome", "ok")
    assert tracing.current() is None
    spans = by_name(exporter.get_finished_spans())
    req, route, attempt = (
        spans["gearbox.request"],
        spans["gearbox.route"],
        spans["gearbox.upstream"],
    )
    assert req.context is not None
    assert route.context is not None
    assert attempt.context is not None
    assert {s.context.trace_id for s in spans.values() if s.context} == {
        0x0AF7651916CD43DD8448EB211C80319C
    }
    assert req.parent is not None
    assert req.parent.is_remote
    assert req.parent.span_id == 0xB7AD6B7169203331
    assert route.parent == attempt.parent == req.context
    assert req.kind is SpanKind.SERVER
    assert attempt.kind is SpanKind.CLIENT
    assert dict(req.attributes or {}) == {
        "http.route": "chat_completions",
        "gearbox.reason": "cheapest_feasible",
    }
    assert dict(attempt.attributes or {}) == {"gearbox.attempt": 1, "gearbox.outcome": "ok"}
    assert carrier == {
        "traceparent": f"00-{attempt.context.trace_id:032x}-{attempt.context.span_id:016x}-01",
        "tracestate": "vendor=abc",
    }
    assert req.start_time is not None
    assert req.end_time is not None
    assert attempt.start_time is not None
    assert attempt.end_time is not None
    assert req.start_time <= attempt.start_time <= attempt.end_time <= req.end_time


def test_a_parent_that_is_not_sampled_records_nothing_but_propagates() -> None:
    tracing, exporter = recording()
    headers = {"traceparent": PARENT[:-2] + "00"}
    with tracing.request_span(headers, "chat_completions") as request:
        assert tracing.current() is None
        with tracing.span("gearbox.upstream") as up:
            up.set_attribute("gearbox.outcome", "ok")
            carrier: dict[str, str] = {}
            tracing.inject(carrier, up, headers)
        request.set_attribute("x", 1)
    assert exporter.get_finished_spans() == ()
    version, trace_id, span_id, flags = carrier["traceparent"].split("-")
    assert (version, trace_id, flags) == ("00", "0af7651916cd43dd8448eb211c80319c", "00")
    assert span_id != "b7ad6b7169203331"


@pytest.mark.parametrize("header", ["garbage", "00-" + "0" * 32 + "-b7ad6b7169203331-01"])
def test_an_invalid_traceparent_starts_a_new_trace(header: str) -> None:
    tracing, exporter = recording()
    with tracing.request_span({"traceparent": header}, "models"):
        pass
    (span,) = exporter.get_finished_spans()
    assert span.parent is None
    assert span.context is not None
    assert span.context.trace_id != 0


def test_an_escaping_exception_is_recorded_but_cancellation_is_not() -> None:
    tracing, exporter = recording()
    with pytest.raises(ValueError, match="boom"), tracing.span("gearbox.route"):
        raise ValueError("boom")
    with pytest.raises(KeyboardInterrupt), tracing.span("gearbox.upstream"):
        raise KeyboardInterrupt
    spans = by_name(exporter.get_finished_spans())
    failed = spans["gearbox.route"]
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.status.description == "ValueError: boom"
    (event,) = failed.events
    assert event.name == "exception"
    assert event.attributes is not None
    assert event.attributes["exception.type"] == "ValueError"
    assert "boom" in str(event.attributes["exception.stacktrace"])
    assert spans["gearbox.upstream"].status.status_code is StatusCode.UNSET


def test_disabled_tracing_makes_no_spans_and_passes_client_headers_on() -> None:
    tracing = build_tracing("none", "gearbox-test")
    assert not tracing.enabled
    span = tracing.request_span({"traceparent": PARENT}, "route")
    assert span is NO_SPAN
    assert tracing.span("gearbox.route") is NO_SPAN
    with span as inside:
        inside.set_attribute("x", 1)
        assert tracing.current() is None
    carrier: dict[str, str] = {}
    tracing.inject(carrier, span, {"traceparent": PARENT})
    assert carrier == {"traceparent": PARENT}
    asyncio.run(tracing.shutdown())
    with pytest.raises(ValueError, match="unknown otel exporter"):
        build_tracing("zipkin", "gearbox-test")


class Kept:
    """A pipeline that keeps our own ended spans (what the OTLP pipeline batches)."""

    def __init__(self) -> None:
        self.spans: list[Span] = []

    def finish(self, span: Span) -> None:
        self.spans.append(span)

    async def run(self) -> None:
        return

    async def shutdown(self) -> None:
        return


RESOURCE = Resource.create({"service.name": "gearbox-test"})


def _varied_spans() -> list[Span]:
    kept = Kept()
    tracing = Tracing(kept)
    with tracing.request_span({"traceparent": PARENT, "tracestate": "a=1,b=2"}, "chat"):
        for attempt in (1, 2):
            with tracing.span(
                "gearbox.upstream",
                SpanKind.CLIENT,
                {"gearbox.attempt": attempt, "ratio": 0.25, "ok": attempt == 2, "n": -3},
            ):
                pass
        with pytest.raises(RuntimeError), tracing.span("gearbox.route"):
            raise RuntimeError("é unicode")
    with tracing.span("root", SpanKind.INTERNAL, {"": "empty key", "big": 2**62}):
        pass
    return kept.spans


def test_the_lean_encoding_is_the_sdk_encoding() -> None:
    spans = _varied_spans()
    encoder = Encoder(RESOURCE)
    reference = encode_spans([readable(s, RESOURCE) for s in spans])
    for _ in range(2):  # the second time from the caches
        data, dropped = encoder.request(spans)
        assert (ExportTraceServiceRequest.FromString(data), dropped) == (reference, 0)


def test_values_the_lean_encoder_does_not_write_go_to_the_sdk() -> None:
    kept = Kept()
    tracing = Tracing(kept)
    for value in (["a", "b"], b"raw", 2**64):
        with tracing.span("odd", attributes={"v": value}):
            pass
    with tracing.span("plain", attributes={"v": "text"}):
        pass
    encoder = Encoder(RESOURCE)
    for span in kept.spans[:3]:
        with pytest.raises(UnsupportedError):
            encoder.span(span)
    data, dropped = encoder.request(kept.spans)
    reference = encode_spans([readable(s, RESOURCE) for s in kept.spans])
    assert (ExportTraceServiceRequest.FromString(data), dropped) == (reference, 0)


def test_spans_that_encode_nowhere_are_left_out_of_their_batch() -> None:
    kept = Kept()
    tracing = Tracing(kept)
    for attributes in ({"v": "\ud800"}, {"\udc00": 1}, {"ok": "fine"}, {"v": ["\ud800"]}):
        with tracing.span("s", attributes=attributes):
            pass
    with tracing.span("name \udfff"):
        pass
    data, dropped = Encoder(RESOURCE).request(kept.spans)
    (scope_spans,) = ExportTraceServiceRequest.FromString(data).resource_spans[0].scope_spans
    # The SDK encoder leaves out the list it cannot encode (and logs it), keeping the span.
    assert [
        dict((a.key, a.value.string_value) for a in s.attributes) for s in scope_spans.spans
    ] == [
        {"ok": "fine"},
        {},
    ]
    assert dropped == 3


def test_spans_wait_for_a_batch_and_beyond_the_queue_are_dropped() -> None:
    counted: list[tuple[str, int]] = []
    sender = OtlpSender(OtlpTarget("http://127.0.0.1:9/v1/traces"))
    pipeline = OtlpPipeline(sender, RESOURCE, lambda reason, n: counted.append((reason, n)))
    tracing = Tracing(pipeline)
    for _ in range(2100):
        with tracing.span("gearbox.route"):
            pass
    assert len(pipeline._take()) == 512
    assert len(pipeline._pending) == 2048 - 512
    assert counted == [("queue_full", 1)] * 52


SDK_SAMPLERS: dict[str, SdkSampler] = {
    "always_on": ALWAYS_ON,
    "always_off": ALWAYS_OFF,
    "traceidratio": TraceIdRatioBased(0.25),
    "parentbased_always_on": ParentBased(ALWAYS_ON),
    "parentbased_always_off": ParentBased(ALWAYS_OFF),
    "parentbased_traceidratio": ParentBased(TraceIdRatioBased(0.25)),
}


@pytest.mark.parametrize("name", sorted(SDK_SAMPLERS))
def test_samplers_decide_as_the_sdk_samplers_do(name: str) -> None:
    ours, sdk = Sampler(name, 0.25), SDK_SAMPLERS[name]
    rng = random.Random(7)
    for _ in range(2000):
        trace_id = rng.getrandbits(128) or 1
        expected = sdk.should_sample(None, trace_id, "s").decision is Decision.RECORD_AND_SAMPLE
        assert ours.root(trace_id) is expected
        for flag in (True, False):
            flags = TraceFlags(TraceFlags.SAMPLED if flag else TraceFlags.DEFAULT)
            parent = SpanContext(trace_id, 1, True, flags)
            context = set_span_in_context(NonRecordingSpan(parent))
            expected = (
                sdk.should_sample(context, trace_id, "s").decision is Decision.RECORD_AND_SAMPLE
            )
            assert ours.under_remote(trace_id, flag) is expected


def test_a_trace_the_sampler_leaves_out_records_nothing_but_propagates() -> None:
    exporter = InMemorySpanExporter()
    tracing = build_tracing("none", "t", span_exporter=exporter, sampler=Sampler("always_off"))
    with tracing.request_span({}, "chat_completions") as request, tracing.span("x") as child:
        carrier: dict[str, str] = {}
        tracing.inject(carrier, child, {})
        request.set_attribute("k", "v")
    assert exporter.get_finished_spans() == ()
    assert carrier["traceparent"].endswith("-00")
    ratio = build_tracing("none", "t", span_exporter=exporter, sampler=Sampler("traceidratio", 0.5))
    for _ in range(400):
        with ratio.request_span({}, "models"), ratio.span("inner"):
            pass
    kept = exporter.get_finished_spans()
    traces = {s.context.trace_id for s in kept if s.context}
    assert len(kept) == 2 * len(traces)  # whole traces, never half of one
    assert 120 < len(traces) < 280


def test_unknown_samplers_are_refused() -> None:
    for name, ratio in (("sometimes", 1.0), ("traceidratio", 1.5)):
        with pytest.raises(ValueError, match="sampler"):
            Sampler(name, ratio)
