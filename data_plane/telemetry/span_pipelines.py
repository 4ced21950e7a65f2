"""Where finished spans go, chosen by settings: `none`, `console`, `otlp`, or a test's exporter.

Builds the `Tracing` an app uses. Kept apart from `tracing` so that the span type and the
exporters that consume it import in one direction only (tracing <- otlp <- span_pipelines).
"""

from __future__ import annotations

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor, SpanExporter

from data_plane.telemetry.otlp import OtlpPipeline
from data_plane.telemetry.tracing import Span, Tracing, readable


class SdkPipeline:
    """Ended spans to an SDK span processor, one by one (tests, console)."""

    __slots__ = ("processor", "resource")

    def __init__(self, processor: SpanProcessor, resource: Resource) -> None:
        self.processor, self.resource = processor, resource

    def finish(self, span: Span) -> None:
        self.processor.on_end(readable(span, self.resource))

    async def run(self) -> None:
        return

    def shutdown(self) -> None:
        self.processor.shutdown()


def build_tracing(
    exporter: str,
    service_name: str,
    otlp_endpoint: str | None = None,
    span_exporter: SpanExporter | None = None,
) -> Tracing:
    """Build the tracing pipeline; `span_exporter` (tests) wins over `exporter`."""
    if span_exporter is None and exporter == "none":
        return Tracing(None)
    resource = Resource.create({"service.name": service_name})
    if span_exporter is not None:
        return Tracing(SdkPipeline(SimpleSpanProcessor(span_exporter), resource))
    if exporter == "console":
        return Tracing(SdkPipeline(SimpleSpanProcessor(ConsoleSpanExporter()), resource))
    if exporter == "otlp":
        return Tracing(OtlpPipeline(otlp_endpoint, resource))
    raise ValueError(f"unknown otel exporter {exporter!r}")
