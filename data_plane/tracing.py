"""Tracing for one app: lean spans handed to OpenTelemetry's span processors, W3C propagation.

The exporter is chosen by settings: `none` (no spans at all; an incoming `traceparent` is still
passed on to engines), `console`, or `otlp` (HTTP, through `otlp.FastOTLPSpanExporter`). Tests
inject their own span exporter.

Why not the SDK's Tracer: a request makes three spans, and the SDK's tracer (sampler and id
generator objects, bounded attributes with locks, context objects attached and detached, a
span copied on end) cost more CPU than the rest of the request's routing. A span here is one
small object with its own context variable for parenting; when it ends, it becomes the SDK's
`ReadableSpan` and goes to the SDK's span processor and exporter like any other span.
Semantics kept from the SDK defaults: parent-based sampling (a remote parent's `sampled`
flag decides; a root is always sampled), the parent's trace state carried on, random 128/64
bit ids, and an exception escaping a span is recorded as an `exception` event with status
ERROR. Exporter and resource settings (OTEL_EXPORTER_OTLP_*, OTEL_RESOURCE_ATTRIBUTES) are
read by the SDK as before; sampler settings (OTEL_TRACES_SAMPLER) are not used.
"""

from __future__ import annotations

import random
import time
import traceback
from collections.abc import Mapping, MutableMapping
from contextvars import ContextVar, Token
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

# Span attribute names (DESIGN.md, Observability).
ATTR_PAIR = "gearbox.pair"
ATTR_TABLE_VERSION = "gearbox.table_version"
ATTR_REASON = "gearbox.reason"
ATTR_ATTEMPT = "gearbox.attempt"
ATTR_ENDPOINT = "gearbox.endpoint"
ATTR_OUTCOME = "gearbox.outcome"

TRACE_HEADERS = ("traceparent", "tracestate")
SCOPE_NAME = "gearbox.data_plane"
_PROPAGATOR = TraceContextTextMapPropagator()
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_NOT_SAMPLED = TraceFlags(TraceFlags.DEFAULT)
_CURRENT: ContextVar[Span | None] = ContextVar("gearbox_current_span", default=None)


class Pipeline:
    """Where ended spans go: the SDK span processor, with this process's resource and scope."""

    __slots__ = ("processor", "resource", "scope")

    def __init__(self, processor: SpanProcessor, resource: Resource) -> None:
        self.processor = processor
        self.resource = resource
        self.scope = InstrumentationScope(SCOPE_NAME)

    def finish(self, span: Span, end_ns: int) -> None:
        self.processor.on_end(
            ReadableSpan(
                span.name,
                span.context,
                span.parent,
                self.resource,
                span.attributes,
                span.events,
                (),
                span.kind,
                None,
                span.status,
                span.start_ns,
                end_ns,
                self.scope,
            )
        )


def _new_id(bits: int) -> int:
    found = random.getrandbits(bits)
    while not found:  # 0 is the invalid id
        found = random.getrandbits(bits)
    return found


class Span:
    """A span of this process: the current span inside its `with` block (parenting the spans
    started there), handed to the pipeline when the block ends. Not sampled (a remote parent
    said so) it only carries ids for propagation."""

    __slots__ = (
        "_pipeline",
        "_token",
        "attributes",
        "context",
        "events",
        "kind",
        "name",
        "parent",
        "start_ns",
        "status",
    )

    def __init__(
        self,
        pipeline: Pipeline,
        name: str,
        kind: SpanKind,
        parent: SpanContext | None,
        attributes: Mapping[str, Any] | None,
    ) -> None:
        self.name, self.kind, self.parent = name, kind, parent
        if parent is None:
            self.context = SpanContext(_new_id(128), _new_id(64), False, _SAMPLED)
        else:
            flags = _SAMPLED if parent.trace_flags.sampled else _NOT_SAMPLED
            trace_id, state = parent.trace_id, parent.trace_state
            self.context = SpanContext(trace_id, _new_id(64), False, flags, state)
        self._pipeline: Pipeline | None = pipeline if self.context.trace_flags.sampled else None
        self.attributes: dict[str, Any] = dict(attributes) if attributes else {}
        self.events: list[Event] = []
        self.status = Status(StatusCode.UNSET)
        self.start_ns = time.time_ns()
        self._token: Token[Span | None] | None = None

    def set_attribute(self, key: str, value: Any) -> None:
        if self._pipeline is not None:
            self.attributes[key] = value

    def __enter__(self) -> Span:
        self._token = _CURRENT.set(self)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._token is not None:
            _CURRENT.reset(self._token)
        pipeline, self._pipeline = self._pipeline, None
        if pipeline is None:
            return
        if isinstance(exc, Exception):  # not CancelledError and friends: not errors
            self._record(exc)
        pipeline.finish(self, time.time_ns())

    def _record(self, exc: Exception) -> None:
        """As the SDK does for an exception that escapes a span."""
        kind = type(exc)
        module = kind.__module__
        name = (
            f"{module}.{kind.__qualname__}"
            if module and module != "builtins"
            else kind.__qualname__
        )
        attributes = {
            "exception.type": name,
            "exception.message": str(exc),
            "exception.stacktrace": "".join(traceback.format_exception(exc)),
            "exception.escaped": "False",
        }
        self.events.append(Event("exception", attributes, time.time_ns()))
        self.status = Status(StatusCode.ERROR, f"{kind.__name__}: {exc}")


class _NoSpan:
    """What tracing `none` hands out: a context manager that records nothing."""

    __slots__ = ()

    def set_attribute(self, key: str, value: Any) -> None:
        pass

    def __enter__(self) -> _NoSpan:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


NO_SPAN = _NoSpan()
AnySpan = Span | _NoSpan


def _remote_parent(headers: Mapping[str, str]) -> SpanContext | None:
    if "traceparent" not in headers:
        return None
    found = trace.get_current_span(_PROPAGATOR.extract(headers)).get_span_context()
    return found if found.is_valid else None


@dataclass(frozen=True, slots=True)
class Tracing:
    """The app's spans plus W3C trace-context helpers; `shutdown` flushes exporters.

    Disabled (`pipeline` None), no span objects are made at all and an incoming
    `traceparent` / `tracestate` is passed to the engine unchanged.
    """

    pipeline: Pipeline | None

    @property
    def enabled(self) -> bool:
        return self.pipeline is not None

    def request_span(self, headers: Mapping[str, str], route: str) -> AnySpan:
        """The server span of one request, child of the client's trace context if any."""
        if self.pipeline is None:
            return NO_SPAN
        parent = _remote_parent(headers)
        attributes = {"http.route": route}
        return Span(self.pipeline, "gearbox.request", SpanKind.SERVER, parent, attributes)

    def span(
        self,
        name: str,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Mapping[str, Any] | None = None,
    ) -> AnySpan:
        """A child of the current span (a root span outside any)."""
        if self.pipeline is None:
            return NO_SPAN
        current = _CURRENT.get()
        parent = None if current is None else current.context
        return Span(self.pipeline, name, kind, parent, attributes)

    def current(self) -> Span | None:
        """The innermost span of this task that is still open and recording."""
        span = _CURRENT.get()
        return span if span is not None and span.context.trace_flags.sampled else None

    def inject(
        self, carrier: MutableMapping[str, str], span: AnySpan, incoming: Mapping[str, str]
    ) -> None:
        """Write trace context for `span` into outgoing headers (or pass `incoming` on)."""
        if not isinstance(span, Span):
            carrier.update(incoming)
            return
        ctx = span.context
        carrier["traceparent"] = f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}"
        if ctx.trace_state:
            carrier["tracestate"] = ctx.trace_state.to_header()

    def shutdown(self) -> None:
        if self.pipeline is not None:
            self.pipeline.processor.shutdown()


def build_tracing(
    exporter: str,
    service_name: str,
    otlp_endpoint: str | None = None,
    span_exporter: SpanExporter | None = None,
) -> Tracing:
    """Build the tracing pipeline; `span_exporter` (tests) wins over `exporter`."""
    if span_exporter is None and exporter == "none":
        return Tracing(None)
    processor: SpanProcessor
    if span_exporter is not None:
        processor = SimpleSpanProcessor(span_exporter)
    elif exporter == "console":
        processor = SimpleSpanProcessor(ConsoleSpanExporter())
    elif exporter == "otlp":
        from data_plane.otlp import FastOTLPSpanExporter

        processor = BatchSpanProcessor(FastOTLPSpanExporter(endpoint=otlp_endpoint))
    else:
        raise ValueError(f"unknown otel exporter {exporter!r}")
    resource = Resource.create({"service.name": service_name})
    return Tracing(Pipeline(processor, resource))
