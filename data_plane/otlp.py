"""OTLP/HTTP span export with a lean protobuf encoder (the SDK exporter's transport as is).

The SDK's OTLP exporter builds a protobuf object per span, per attribute and per value,
which costs more CPU than making the spans. `encode_request` writes the same
ExportTraceServiceRequest wire bytes directly: span fields with fixed tags, attribute
key/values cached (a data plane repeats the same few pairs, endpoints and outcomes), and the
resource and scope encoded once, by the SDK's own encoder. Anything it was not written for
(links, values other than str/bool/int/float, ints beyond int64) makes it hand the batch to the
SDK encoder, so every batch is encoded either way. Endpoint, headers, compression, timeouts
and retries stay the SDK exporter's (OTEL_EXPORTER_OTLP_* settings included).
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.trace import SpanKind

logger = logging.getLogger(__name__)

_MAX_CACHED = 4096  # attribute encodings kept (a bounded set: pairs x endpoints x outcomes)
_INT64 = range(-(2**63), 2**63)
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
_fixed32 = struct.Struct("<I").pack


class _UnsupportedError(Exception):
    """Something the lean encoder does not write; the SDK encoder takes the batch."""


def _varint(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
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
            raise _UnsupportedError("int beyond int64")
        return b"\x18" + _varint(value & 0xFFFFFFFFFFFFFFFF)
    if isinstance(value, float):
        return b"\x21" + _double(value)
    raise _UnsupportedError(type(value).__name__)


_Header = tuple[bytes, bytes, bytes, bytes]  # resource, scope, scope URL, resource URL fields


class _Encoder:
    """Span and attribute encodings, with the attribute cache (the exporter thread's own)."""

    def __init__(self) -> None:
        self._attributes: dict[tuple[int, str, type, Any], bytes] = {}
        self._headers: dict[tuple[int, int], tuple[object, object, _Header]] = {}

    def attribute(self, tag: int, key: str, value: Any) -> bytes:
        """One KeyValue as a field under `tag` (9 in a Span, 3 in an Event), cached."""
        if not isinstance(value, str | int | float):  # bool is an int
            raise _UnsupportedError(type(value).__name__)
        cache_key = (tag, key, type(value), value)
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
        return b"".join(self.attribute(tag, k, v) for k, v in attributes.items())

    def span(self, span: ReadableSpan) -> bytes:
        """One Span message as a field of ScopeSpans (tag 2)."""
        ctx = span.context
        if ctx is None or span.links:
            raise _UnsupportedError("span without context, or with links")
        out = [b"\x0a\x10", ctx.trace_id.to_bytes(16, "big"), b"\x12\x08"]
        out.append(ctx.span_id.to_bytes(8, "big"))
        state = ctx.trace_state
        if state:
            out.append(_field(0x1A, ",".join(f"{k}={v}" for k, v in state.items()).encode()))
        flags = _HAS_IS_REMOTE
        parent = span.parent
        if parent is not None:
            out += (b"\x22\x08", parent.span_id.to_bytes(8, "big"))
            flags |= _IS_REMOTE if parent.is_remote else 0
        out += (_field(0x2A, span.name.encode("utf-8")), b"\x30", _varint(_KIND[span.kind]))
        out += (b"\x39", _fixed64(span.start_time or 0), b"\x41", _fixed64(span.end_time or 0))
        out.append(self.attributes(0x4A, span.attributes))
        if span.dropped_attributes:
            out += (b"\x50", _varint(span.dropped_attributes))
        for event in span.events:
            out.append(_field(0x5A, self._event(event)))
        if span.dropped_events:
            out += (b"\x60", _varint(span.dropped_events))
        out.append(_field(0x7A, _status(span)))
        out += (b"\x85\x01", _fixed32(flags))
        return _field(0x12, b"".join(out))

    def _event(self, event: Event) -> bytes:
        body = b"\x09" + _fixed64(event.timestamp) + _field(0x12, event.name.encode("utf-8"))
        body += self.attributes(0x1A, event.attributes)
        if event.dropped_attributes:
            body += b"\x20" + _varint(event.dropped_attributes)
        return body

    def header(self, span: ReadableSpan) -> _Header:
        """The fields around `span`'s group: its resource and scope, encoded once per pair
        of objects by the SDK's own encoder."""
        resource, scope = span.resource, span.instrumentation_scope
        key = (id(resource), id(scope))
        found = self._headers.get(key)
        if found is None or found[0] is not resource or found[1] is not scope:
            reference = encode_spans([span]).resource_spans[0]
            scope_spans = reference.scope_spans[0]
            header = (
                _field(0x0A, reference.resource.SerializeToString()),
                _field(0x0A, scope_spans.scope.SerializeToString()),
                _field(0x1A, scope_spans.schema_url.encode()) if scope_spans.schema_url else b"",
                _field(0x1A, reference.schema_url.encode()) if reference.schema_url else b"",
            )
            found = self._headers[key] = (resource, scope, header)
        return found[2]


def _status(span: ReadableSpan) -> bytes:
    status = span.status
    body = b""
    if status.description:
        body += _field(0x12, status.description.encode("utf-8"))
    if status.status_code.value:
        body += b"\x18" + _varint(status.status_code.value)
    return body


def encode_request(encoder: _Encoder, spans: Sequence[ReadableSpan]) -> bytes:
    """ExportTraceServiceRequest wire bytes for `spans`, grouped by resource and scope in
    order of first appearance."""
    groups: dict[tuple[int, int], tuple[_Header, list[bytes]]] = {}
    for span in spans:
        key = (id(span.resource), id(span.instrumentation_scope))
        group = groups.get(key)
        if group is None:
            group = groups[key] = (encoder.header(span), [])
        group[1].append(encoder.span(span))
    out = []
    for (resource, scope, scope_url, resource_url), encoded in groups.values():
        scope_spans = _field(0x12, scope + b"".join(encoded) + scope_url)
        out.append(_field(0x0A, resource + scope_spans + resource_url))
    return b"".join(out)


class FastOTLPSpanExporter(OTLPSpanExporter):
    """The SDK's OTLP/HTTP span exporter with `encode_request` as its encoder."""

    def __init__(self, endpoint: str | None = None) -> None:
        super().__init__(endpoint=endpoint)
        self._encoder = _Encoder()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._shutdown:
            return super().export(spans)  # warns and fails, as the SDK does
        try:
            data = encode_request(self._encoder, spans)
        except _UnsupportedError:
            return super().export(spans)
        return self._send(data, len(spans))

    def _send(self, data: bytes, count: int) -> SpanExportResult:
        """The SDK exporter's send step for encoded bytes (size check, client, metrics)."""
        with self._metrics.export_operation(count) as result:
            if self._max_request_size > 0 and len(data) > self._max_request_size:
                logger.warning("dropping a span batch of %d bytes (over the limit)", len(data))
                result.error = ValueError("span batch over max_request_size")
                return SpanExportResult.FAILURE
            sent = self._client.export(data)
            if not sent.success:
                result.error = sent.error
                return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS
