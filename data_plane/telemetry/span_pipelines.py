"""Where finished spans go, chosen by settings: `none`, `console`, `otlp`, or a test's exporter.

Builds the `Tracing` an app uses. Kept apart from `tracing` so that the span type and the
exporters that consume it import in one direction only (tracing <- otlp <- span_pipelines).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor, SpanExporter
from opentelemetry.sdk.version import __version__ as sdk_version

from data_plane.settings import OtelSettings
from data_plane.telemetry.otlp import OnDropped, OtlpPipeline
from data_plane.telemetry.otlp_http import OtlpSender, OtlpTarget, Transport
from data_plane.telemetry.sampling import DEFAULT_SAMPLER, Sampler
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

    async def shutdown(self) -> None:
        """The SDK processor's shutdown blocks (it may export): off the event loop."""
        await asyncio.to_thread(self.processor.shutdown)


def span_resource(service_name: str, attributes: Mapping[str, str]) -> Resource:
    """The resource of every span: the SDK's telemetry.sdk.* attributes, the configured ones
    (OTEL_RESOURCE_ATTRIBUTES, from settings) and `service.name`. Built directly rather than
    by `Resource.create`, which reads the environment and runs detectors on its own."""
    sdk = {
        "telemetry.sdk.language": "python",
        "telemetry.sdk.name": "opentelemetry",
        "telemetry.sdk.version": sdk_version,
    }
    return Resource({**sdk, **attributes, "service.name": service_name})


def build_tracing(
    exporter: str,
    service_name: str,
    otlp: OtlpTarget | None = None,
    span_exporter: SpanExporter | None = None,
    sampler: Sampler = DEFAULT_SAMPLER,
    on_dropped: OnDropped | None = None,
    span_processor: SpanProcessor | None = None,
    resource_attributes: Mapping[str, str] | None = None,
    otlp_transport: Transport | None = None,
) -> Tracing:
    """Build the tracing pipeline; `span_processor` (the benchmark) or `span_exporter`
    (tests) win over `exporter`; `on_dropped` counts spans the OTLP pipeline could not send;
    `otlp_transport` posts its batches (aiohttp's client when None)."""
    if span_processor is None and span_exporter is None and exporter == "none":
        return Tracing(None)
    resource = span_resource(service_name, resource_attributes or {})
    if span_processor is not None:
        return Tracing(SdkPipeline(span_processor, resource), sampler)
    if span_exporter is not None:
        return Tracing(SdkPipeline(SimpleSpanProcessor(span_exporter), resource), sampler)
    if exporter == "console":
        processor = SimpleSpanProcessor(ConsoleSpanExporter())
        return Tracing(SdkPipeline(processor, resource), sampler)
    if exporter == "otlp" and otlp is not None:
        sender = OtlpSender(otlp, otlp_transport)
        return Tracing(OtlpPipeline(sender, resource, on_dropped), sampler)
    raise ValueError(f"unknown otel exporter {exporter!r} (otlp needs a target)")


def otlp_target(otel: OtelSettings) -> OtlpTarget | None:
    """Where and how the OTLP pipeline posts, from the settings (None: no URL set)."""
    url = otel.otlp_traces_url
    if url is None:
        return None
    return OtlpTarget(
        url, dict(otel.otlp_headers), otel.otlp_timeout_ms / 1000.0, otel.otlp_compression == "gzip"
    )


def tracing_for(
    otel: OtelSettings,
    on_dropped: OnDropped | None = None,
    span_exporter: SpanExporter | None = None,
    span_processor: SpanProcessor | None = None,
    otlp_transport: Transport | None = None,
) -> Tracing:
    """`build_tracing` configured by `settings.otel`."""
    return build_tracing(
        otel.exporter,
        otel.service_name,
        otlp_target(otel),
        span_exporter,
        Sampler(otel.sampler, otel.sampler_arg),
        on_dropped,
        span_processor,
        dict(otel.resource_attributes),
        otlp_transport,
    )
