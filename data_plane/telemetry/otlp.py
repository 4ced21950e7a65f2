"""OTLP/HTTP span export: each span encoded as it ends, batches posted by `otlp_http`.

The SDK's batch processor and OTLP encoder turn every span into a ReadableSpan, a queue entry
and a tree of protobuf objects (one per attribute and value), which costs more CPU than the
request itself (`make bench` compares the two, docs/benchmarks.md). Here a span is written as
its wire bytes when it ends, on the event loop (a few us, spread evenly over the requests),
by `Encoder`: fixed tags, attribute key/values cached (a data plane repeats the same few
pairs, endpoints and outcomes), resource and scope encoded once by the SDK's public encoder
(`encode_spans`). A background task owned by the app joins them into batches (512, or
whatever waited 5 s) and posts each without blocking the loop (`otlp_http`). (Encoding a
whole batch in a worker thread held the GIL while requests waited for it: docs/data_plane.md,
"Observability".)
A span with values the lean encoder was not written for (other than str/bool/int/float,
ints beyond int64) is encoded by the SDK's encoder; a span neither can encode (a lone
surrogate in a string) is dropped and counted. Nothing here reads the SDK exporter's private
state.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.trace import SpanContext, SpanKind

from data_plane.telemetry.otlp_http import OtlpSender
from data_plane.telemetry.tracing import SCOPE, Span, readable
from data_plane.telemetry.tracing import UNSET_STATUS as _UNSET_STATUS

logger = logging.getLogger(__name__)

BATCH_SPANS = 512  # the SDK batch processor's defaults
MAX_QUEUED_SPANS = 2048
EXPORT_DELAY_S = 5.0
_MAX_CACHED = 4096  # attribute encodings kept (a bounded set: pairs x endpoints x outcomes)
_INT64 = range(-(2**63), 2**63)
_ATTRIBUTE_TYPES = (str, int, float)
_KIND = {
    SpanKind.INTERNAL: 1,
    SpanKind.SERVER: 2,
    SpanKind.CLIENT: 3,
    SpanKind.PRODUCER: 4,
    SpanKind.CONSUMER: 5,
}
_HAS_IS_REMOTE, _IS_REMOTE = 0x100, 0x200  # SpanFlags
_double = struct.Struct("<d").pack
_fixed64 = struct.Struct("<Q").pack
_TIMES = struct.Struct("<BQBQ").pack  # start and end time fields (tags 7 and 8, fixed64)
# trace_id (tag 1, 16 bytes) and span_id (tag 2, 8 bytes) with their tag and length bytes,
# the ids big-endian; then parent_span_id (tag 4, 8 bytes)
_IDS = struct.Struct(">HQQHQ").pack
_PARENT = struct.Struct(">HQ").pack
_U64 = 0xFFFFFFFFFFFFFFFF
_FLAGS_LOCAL = b"\x85\x01" + struct.pack("<I", _HAS_IS_REMOTE)  # flags field (16, fixed32)
_FLAGS_REMOTE = b"\x85\x01" + struct.pack("<I", _HAS_IS_REMOTE | _IS_REMOTE)
_NO_STATUS = b"\x7a\x00"  # an empty Status (UNSET, no message): the SDK always sends one


class UnsupportedError(Exception):
    """Something the lean encoder does not write; the SDK encoder takes the span."""


# Why spans were not exported (the `reason` label of gearbox_spans_dropped_total).
DROPPED_UNENCODABLE = "unencodable"
DROPPED_QUEUE_FULL = "queue_full"
DROPPED_EXPORT_FAILED = "export_failed"
DROP_REASONS = (DROPPED_UNENCODABLE, DROPPED_QUEUE_FULL, DROPPED_EXPORT_FAILED)
OnDropped = Callable[[str, int], None]  # (reason, how many spans)


_ONE_BYTE = tuple(bytes((n,)) for n in range(0x80))


def _varint(n: int) -> bytes:
    if n < 0x80:
        return _ONE_BYTE[n]
    if n < 0x4000:  # most lengths of a span's fields: two bytes, no loop
        return bytes(((n & 0x7F) | 0x80, n >> 7))
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(tag: int, payload: bytes) -> bytes:
    """A length-delimited field: tag byte, length, payload."""
    return bytes((tag,)) + _varint(len(payload)) + payload


def _any_value(value: Any) -> bytes:
    if isinstance(value, bool):  # before int: bool is an int
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, str):
        return _field(0x0A, value.encode("utf-8"))
    if isinstance(value, int):
        if value not in _INT64:
            raise UnsupportedError("int beyond int64")
        return b"\x18" + _varint(value & 0xFFFFFFFFFFFFFFFF)
    return b"\x21" + _double(value)


def _status(span: Span) -> bytes:
    status = span.status
    body = b""
    if status.description:
        body += _field(0x12, status.description.encode("utf-8"))
    if status.status_code.value:
        body += b"\x18" + _varint(status.status_code.value)
    return body


class Encoder:
    """Wire bytes of spans of one resource; keeps the attribute cache (one thread uses it)."""

    def __init__(self, resource: Resource) -> None:
        self._attributes: dict[tuple[Any, ...], bytes] = {}
        self._names: dict[str, tuple[SpanKind, bytes]] = {}
        self._resource = resource
        self._header: tuple[bytes, bytes, bytes, bytes] | None = None

    def attribute(self, tag: int, key: str, value: Any) -> bytes:
        """One KeyValue as a field under `tag` (9 in a Span, 3 in an Event), cached.

        The cache key carries the value's type (True, 1 and 1.0 are equal keys otherwise);
        a plain str value, the usual case, needs no type in its key: no other type is equal
        to a str."""
        kind = type(value)
        if kind is str:
            cache_key: tuple[Any, ...] = (tag, key, value)
        elif isinstance(value, _ATTRIBUTE_TYPES):  # bool is an int
            cache_key = (tag, key, kind, value)
        else:
            raise UnsupportedError(kind.__name__)
        found = self._attributes.get(cache_key)
        if found is None:
            name = _field(0x0A, key.encode("utf-8")) if key else b""
            found = _field(tag, name + _field(0x12, _any_value(value)))
            if len(self._attributes) >= _MAX_CACHED:
                self._attributes.clear()
            self._attributes[cache_key] = found
        return found

    def attributes(self, tag: int, attributes: Mapping[str, Any] | None) -> bytes:
        if not attributes:
            return b""
        return b"".join([self.attribute(tag, k, v) for k, v in attributes.items()])

    def _named(self, name: str, kind: SpanKind) -> bytes:
        """The name and kind fields of a span (cached: a data plane has three span names).
        Keyed by name, the kind compared by identity: hashing an Enum member runs Python
        code, and the cache is read for every span."""
        found = self._names.get(name)
        if found is None or found[0] is not kind:
            found = (kind, _field(0x2A, name.encode("utf-8")) + b"\x30" + _varint(_KIND[kind]))
            self._names[name] = found
        return found[1]

    def span(self, span: Span) -> bytes:
        """One Span message as a field of ScopeSpans (tag 2)."""
        trace_id, parent = span.trace_id, span.parent
        out = [_IDS(0x0A10, trace_id >> 64, trace_id & _U64, 0x1208, span.span_id)]
        state = span.trace_state
        if state:
            out.append(_field(0x1A, ",".join(f"{k}={v}" for k, v in state.items()).encode()))
        if parent is not None:
            out.append(_PARENT(0x2208, parent.span_id))
        out.append(self._named(span.name, span.kind))
        out.append(_TIMES(0x39, span.start_ns, 0x41, span.end_ns))
        if span.attributes:
            cached = self._attributes.get
            for key, value in span.attributes.items():  # the usual str value: inline lookup
                found = cached((0x4A, key, value)) if type(value) is str else None
                out.append(found or self.attribute(0x4A, key, value))
        for event in span.events:
            out.append(_field(0x5A, self._event(event)))
        status = span.status
        out.append(_NO_STATUS if status is _UNSET_STATUS else _field(0x7A, _status(span)))
        remote = parent is not None and parent.is_remote
        out.append(_FLAGS_REMOTE if remote else _FLAGS_LOCAL)
        body = b"".join(out)
        return b"\x12" + _varint(len(body)) + body

    def _event(self, event: Event) -> bytes:
        body = b"\x09" + _fixed64(event.timestamp) + _field(0x12, event.name.encode("utf-8"))
        body += self.attributes(0x1A, event.attributes)
        if event.dropped_attributes:
            body += b"\x20" + _varint(event.dropped_attributes)
        return body

    def _envelope(self) -> tuple[bytes, bytes, bytes, bytes]:
        """(resource, scope, scope schema URL, resource schema URL) fields, by the SDK's own
        encoder, once."""
        if self._header is None:
            probe = ReadableSpan(
                "probe",
                SpanContext(1, 1, False),
                resource=self._resource,
                instrumentation_scope=SCOPE,
            )
            reference = encode_spans([probe]).resource_spans[0]
            scope_spans = reference.scope_spans[0]
            self._header = (
                _field(0x0A, reference.resource.SerializeToString()),
                _field(0x0A, scope_spans.scope.SerializeToString()),
                _field(0x1A, scope_spans.schema_url.encode()) if scope_spans.schema_url else b"",
                _field(0x1A, reference.schema_url.encode()) if reference.schema_url else b"",
            )
        return self._header

    def request(self, spans: Sequence[Span]) -> tuple[bytes, int]:
        """ExportTraceServiceRequest wire bytes for `spans` (all of this encoder's resource),
        and how many spans could not be encoded and were left out."""
        encoded, dropped = [], 0
        for span in spans:
            try:
                encoded.append(self.one(span))
            except Exception:  # a span nobody can encode must not take its batch along
                dropped += 1
        return self.wrap(encoded), dropped

    def wrap(self, encoded: Sequence[bytes]) -> bytes:
        """ExportTraceServiceRequest wire bytes around spans `one` encoded."""
        resource, scope, scope_url, resource_url = self._envelope()
        body = _field(0x12, scope + b"".join(encoded) + scope_url)
        return _field(0x0A, resource + body + resource_url)

    def one(self, span: Span) -> bytes:
        """One span's bytes (the lean encoder, else the SDK's); raises if neither can."""
        try:
            return self.span(span)
        except UnsupportedError:
            return self.sdk_span(span)

    def sdk_span(self, span: Span) -> bytes:
        """One Span message as a field of ScopeSpans, by the SDK's encoder (which leaves out an
        attribute it cannot encode, logging it; a lone surrogate in a name raises)."""
        request = encode_spans([readable(span, self._resource)])
        message = request.resource_spans[0].scope_spans[0].spans[0]
        return _field(0x12, message.SerializeToString())


class OtlpPipeline:
    """Spans are encoded as they end and wait as bytes; `run` posts them in batches."""

    def __init__(
        self, sender: OtlpSender, resource: Resource, on_dropped: OnDropped | None = None
    ) -> None:
        self.sender = sender
        self.encoder = Encoder(resource)
        self._on_dropped = on_dropped or _not_counted
        self._pending: list[bytes] = []
        self._wake: asyncio.Event | None = None
        self._posting: asyncio.Future[None] | None = None
        self._warned: set[str] = set()

    def finish(self, span: Span) -> None:
        pending = self._pending
        if len(pending) >= MAX_QUEUED_SPANS:
            self._dropped(DROPPED_QUEUE_FULL, 1, "span export cannot keep up; dropping spans")
            return
        try:
            pending.append(self.encoder.one(span))
        except Exception:  # a span nobody can encode is dropped alone
            self._dropped(DROPPED_UNENCODABLE, 1, "dropped spans that do not encode")
            return
        if len(pending) >= BATCH_SPANS and self._wake is not None:
            self._wake.set()

    def _take(self) -> list[bytes]:
        batch, self._pending = self._pending[:BATCH_SPANS], self._pending[BATCH_SPANS:]
        return batch

    def _dropped(self, reason: str, count: int, message: str) -> None:
        self._on_dropped(reason, count)
        if reason not in self._warned:  # once per reason: a log line per span would flood
            self._warned.add(reason)
            logger.warning(message)

    async def send(self, spans: Sequence[Span]) -> tuple[int, int]:
        """Encode and post one batch; never raises. Returns (spans that did not encode, spans
        encoded but not accepted)."""
        try:
            data, unencodable = self.encoder.request(spans)
        except Exception:  # the envelope itself: nothing of this batch can go
            logger.exception("span batch not encodable")
            return len(spans), 0
        encoded = len(spans) - unencodable
        if encoded and not await self.sender.send(data):
            return unencodable, encoded
        return unencodable, 0

    async def post(self, encoded: Sequence[bytes]) -> None:
        """Post spans `Encoder.one` wrote; never raises; counts what was not accepted."""
        try:
            data = self.encoder.wrap(encoded)
        except Exception:  # the envelope itself: nothing of this batch can go
            logger.exception("span batch not encodable")
            accepted = False
        else:
            accepted = await self.sender.send(data)
        if not accepted:
            self._dropped(DROPPED_EXPORT_FAILED, len(encoded), "span export failed; spans dropped")

    async def run(self) -> None:
        """Until cancelled: post every full batch as soon as it is full, and whatever waited
        EXPORT_DELAY_S, one batch at a time. A post under way when this is cancelled goes
        on; `shutdown` waits for it."""
        wake = self._wake = asyncio.Event()
        while True:
            full = False
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(EXPORT_DELAY_S):
                    full = await wake.wait()
            wake.clear()
            while len(self._pending) >= (BATCH_SPANS if full else 1):
                self._posting = asyncio.ensure_future(self.post(self._take()))
                await asyncio.shield(self._posting)

    async def shutdown(self) -> None:
        """The post under way, then what is left; then the connection pool is closed."""
        if self._posting is not None:
            await self._posting
        while self._pending:
            await self.post(self._take())
        await self.sender.close()


def _not_counted(reason: str, count: int) -> None:
    return
