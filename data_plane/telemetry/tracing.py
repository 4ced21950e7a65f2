"""Tracing for one app: lean spans, W3C propagation, and where finished spans go.

The exporter is chosen by settings: `none` (no spans at all; an incoming `traceparent` is still
passed on to engines), `console`, or `otlp` (HTTP: batched on the event loop, encoded and
posted by `otlp`). Tests inject their own SDK span exporter.

Why not the SDK's Tracer: a request makes three spans, and the SDK's tracer (sampler and id
generator objects, bounded attributes with locks, context objects attached and detached, a
span copied on end, a processor call per span) cost more CPU than the request's routing. A
span here is one small object with a context variable for parenting. Semantics kept from the
SDK: head sampling by the SDK's built-in samplers (`sampling`, OTEL_TRACES_SAMPLER; the
default, parent-based always-on, samples every root and follows a remote parent's flag), the
parent's trace state carried on, random 128/64-bit ids, and an exception escaping a span
recorded as an `exception` event with status ERROR. Batch settings (OTEL_BSP_*) are not used.
"""

from __future__ import annotations

import random
import time
import traceback
from collections.abc import Mapping, MutableMapping, Sequence
from contextvars import ContextVar, Token
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.trace.span import TraceState

from data_plane.telemetry.sampling import DEFAULT_SAMPLER, Sampler

# Span attribute names (docs/data_plane.md, "Observability").
ATTR_PAIR = "gearbox.pair"
ATTR_TABLE_VERSION = "gearbox.table_version"
ATTR_REASON = "gearbox.reason"
ATTR_ATTEMPT = "gearbox.attempt"
ATTR_ENDPOINT = "gearbox.endpoint"
ATTR_OUTCOME = "gearbox.outcome"

TRACE_HEADERS = ("traceparent", "tracestate")
SCOPE = InstrumentationScope("gearbox.data_plane")
_PROPAGATOR = TraceContextTextMapPropagator()
UNSET_STATUS = Status(StatusCode.UNSET)  # shared by every span that ends without an error
_CURRENT: ContextVar[Span | None] = ContextVar("gearbox_current_span", default=None)


class Pipeline(Protocol):
    """Where a recorded span goes when it ends (called on the event loop)."""

    def finish(self, span: Span) -> None: ...

    async def run(self) -> None:
        """Background work until cancelled (batch export); returns at once if there is none."""
        ...

    async def shutdown(self) -> None:
        """Send what is left and close the exporter."""
        ...


def _new_id(bits: int) -> int:
    found = random.getrandbits(bits)
    while not found:  # 0 is the invalid id
        found = random.getrandbits(bits)
    return found


class Span:
    """A span of this process: the current span inside its `with` block (parenting the spans
    started there), given to the pipeline when the block ends, then read-only. Not sampled
    (the sampler or a remote parent said so) it only carries ids for propagation."""

    __slots__ = (
        "_context",
        "_pipeline",
        "_token",
        "attributes",
        "end_ns",
        "events",
        "kind",
        "name",
        "parent",
        "sampled",
        "span_id",
        "start_ns",
        "status",
        "trace_id",
        "trace_state",
    )
    is_remote = False  # as a parent

    def __init__(
        self,
        pipeline: Pipeline,
        name: str,
        kind: SpanKind,
        parent: Span | SpanContext | None,
        attributes: Mapping[str, Any] | None,
        sampler: Sampler = DEFAULT_SAMPLER,
    ) -> None:
        self.name, self.kind, self.parent = name, kind, parent
        if parent is None:
            self.trace_id = trace_id = _new_id(128)
            self.sampled, self.trace_state = sampler.root(trace_id), None
        elif isinstance(parent, Span):
            self.trace_id, self.sampled = parent.trace_id, parent.sampled
            self.trace_state = parent.trace_state
        else:
            self.trace_id = parent.trace_id
            self.sampled = sampler.under_remote(parent.trace_id, parent.trace_flags.sampled)
            self.trace_state = parent.trace_state
        self.span_id = random.getrandbits(64) or _new_id(64)  # 0 is invalid (1 in 2**64)
        self._pipeline: Pipeline | None = pipeline if self.sampled else None
        self.attributes: dict[str, Any] = dict(attributes) if attributes else {}
        self.events: Sequence[Event] = ()  # a list once an exception is recorded
        self.status = UNSET_STATUS
        self.start_ns = time.time_ns()
        self.end_ns = 0
        self._token: Token[Span | None] | None = None
        self._context: SpanContext | None = None

    @property
    def context(self) -> SpanContext:
        if self._context is None:
            flags = TraceFlags(TraceFlags.SAMPLED if self.sampled else TraceFlags.DEFAULT)
            ids = (self.trace_id, self.span_id)
            self._context = SpanContext(*ids, False, flags, self.trace_state)
        return self._context

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
        self.end_ns = time.time_ns()
        pipeline.finish(self)

    def _record(self, exc: Exception) -> None:
        """As the SDK does for an exception that escapes a span."""
        kind = type(exc)
        module, name = kind.__module__, kind.__qualname__
        if module and module != "builtins":
            name = f"{module}.{name}"
        attributes = {
            "exception.type": name,
            "exception.message": str(exc),
            "exception.stacktrace": "".join(traceback.format_exception(exc)),
            "exception.escaped": "False",
        }
        self.events = [*self.events, Event("exception", attributes, time.time_ns())]
        self.status = Status(StatusCode.ERROR, f"{kind.__name__}: {exc}")


def readable(span: Span, resource: Resource) -> ReadableSpan:
    """An ended span as the SDK's ReadableSpan (what SDK processors and exporters take)."""
    parent = span.parent.context if isinstance(span.parent, Span) else span.parent
    return ReadableSpan(
        span.name,
        span.context,
        parent,
        resource,
        span.attributes,
        span.events,
        (),
        span.kind,
        None,
        span.status,
        span.start_ns,
        span.end_ns,
        SCOPE,
    )


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
    """The app's spans plus W3C trace-context helpers.

    Disabled (`pipeline` None), no span objects are made at all and an incoming
    `traceparent` / `tracestate` is passed to the engine unchanged.
    """

    pipeline: Pipeline | None
    sampler: Sampler = DEFAULT_SAMPLER

    @property
    def enabled(self) -> bool:
        return self.pipeline is not None

    def request_span(self, headers: Mapping[str, str], route: str) -> AnySpan:
        """The server span of one request, child of the client's trace context if any."""
        if self.pipeline is None:
            return NO_SPAN
        parent = _remote_parent(headers)
        attributes = {"http.route": route}
        pipeline = self.pipeline
        return Span(pipeline, "gearbox.request", SpanKind.SERVER, parent, attributes, self.sampler)

    def span(
        self,
        name: str,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Mapping[str, Any] | None = None,
    ) -> AnySpan:
        """A child of the current span (a root span outside any)."""
        if self.pipeline is None:
            return NO_SPAN
        return Span(self.pipeline, name, kind, _CURRENT.get(), attributes, self.sampler)

    def current(self) -> Span | None:
        """The innermost span of this task that is still open and recording."""
        span = _CURRENT.get()
        return span if span is not None and span.sampled else None

    def inject(
        self, carrier: MutableMapping[str, str], span: AnySpan, incoming: Mapping[str, str]
    ) -> None:
        """Write trace context for `span` into outgoing headers (or pass `incoming` on)."""
        if not isinstance(span, Span):
            carrier.update(incoming)
            return
        flags = "01" if span.sampled else "00"
        carrier["traceparent"] = f"00-{span.trace_id:032x}-{span.span_id:016x}-{flags}"
        state: TraceState | None = span.trace_state
        if state:
            carrier["tracestate"] = state.to_header()

    async def run(self) -> None:
        """The pipeline's background work (batch export), for the app's cleanup context."""
        if self.pipeline is not None:
            await self.pipeline.run()

    async def shutdown(self) -> None:
        """Send what is left and close the exporter."""
        if self.pipeline is not None:
            await self.pipeline.shutdown()
