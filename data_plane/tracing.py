"""OpenTelemetry setup for one app: a tracer per app (no global provider) and W3C propagation.

The exporter is chosen by settings: `none` (no-op tracer; an incoming `traceparent` is still
passed on to engines), `console`, or `otlp` (HTTP). Tests inject their own span exporter.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

# Span attribute names (DESIGN.md, Observability).
ATTR_PAIR = "gearbox.pair"
ATTR_TABLE_VERSION = "gearbox.table_version"
ATTR_REASON = "gearbox.reason"
ATTR_ATTEMPT = "gearbox.attempt"
ATTR_ENDPOINT = "gearbox.endpoint"
ATTR_OUTCOME = "gearbox.outcome"

TRACE_HEADERS = ("traceparent", "tracestate")
_PROPAGATOR = TraceContextTextMapPropagator()
# Reusable: entering it allocates nothing, so disabled tracing costs next to nothing per request.
_NO_SPAN: AbstractContextManager[trace.Span] = nullcontext(trace.INVALID_SPAN)


@dataclass(frozen=True, slots=True)
class Tracing:
    """The app's tracer plus W3C trace-context helpers; `shutdown` flushes exporters.

    Disabled (exporter `none`), no span objects are made at all and an incoming
    `traceparent` / `tracestate` is passed to the engine unchanged.
    """

    tracer: trace.Tracer
    provider: TracerProvider | None

    @property
    def enabled(self) -> bool:
        return self.provider is not None

    def request_span(
        self, headers: Mapping[str, str], route: str
    ) -> AbstractContextManager[trace.Span]:
        """The server span of one request, child of the client's trace context if any."""
        if self.provider is None:
            return _NO_SPAN
        return self.tracer.start_as_current_span(
            "gearbox.request",
            context=_PROPAGATOR.extract(headers),
            kind=trace.SpanKind.SERVER,
            attributes={"http.route": route},
        )

    def span(
        self,
        name: str,
        kind: trace.SpanKind = trace.SpanKind.INTERNAL,
        attributes: Mapping[str, Any] | None = None,
    ) -> AbstractContextManager[trace.Span]:
        if self.provider is None:
            return _NO_SPAN
        return self.tracer.start_as_current_span(name, kind=kind, attributes=attributes)

    def inject(
        self, carrier: MutableMapping[str, str], span: trace.Span, incoming: Mapping[str, str]
    ) -> None:
        """Write trace context for `span` into outgoing headers (or pass `incoming` on)."""
        if self.provider is None:
            carrier.update(incoming)
        else:
            _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))

    def shutdown(self) -> None:
        if self.provider is not None:
            self.provider.shutdown()


def build_tracing(
    exporter: str,
    service_name: str,
    otlp_endpoint: str | None = None,
    span_exporter: SpanExporter | None = None,
) -> Tracing:
    """Build the tracer; `span_exporter` (tests) wins over `exporter`."""
    if span_exporter is None and exporter == "none":
        return Tracing(trace.NoOpTracer(), None)
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    if span_exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(span_exporter))
    elif exporter == "console":
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
    elif exporter == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=otlp_endpoint)))
    else:
        raise ValueError(f"unknown otel exporter {exporter!r}")
    return Tracing(provider.get_tracer("gearbox.data_plane"), provider)
