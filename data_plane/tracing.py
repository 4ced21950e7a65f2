"""OpenTelemetry setup for one app: a tracer per app (no global provider) and W3C propagation.

The exporter is chosen by settings: `none` (no-op tracer; an incoming `traceparent` is still
passed on to engines), `console`, or `otlp` (HTTP). Tests inject their own span exporter.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass

from opentelemetry import context as otel_context
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

_PROPAGATOR = TraceContextTextMapPropagator()


@dataclass(frozen=True, slots=True)
class Tracing:
    """The app's tracer plus W3C trace-context helpers; `shutdown` flushes exporters."""

    tracer: trace.Tracer
    provider: TracerProvider | None

    def extract(self, headers: Mapping[str, str]) -> otel_context.Context:
        """The parent context a client sent in `traceparent` / `tracestate` (or an empty one)."""
        return _PROPAGATOR.extract(headers)

    def inject(self, carrier: MutableMapping[str, str], span: trace.Span) -> None:
        """Write `traceparent` for `span` into outgoing headers."""
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
