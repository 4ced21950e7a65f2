"""HTTP/1.1 on the wire for `http1`: the connection protocol and the request bytes.

Responses are parsed by llhttp (through `httptools`, the binding uvloop's and uvicorn's HTTP
servers use; aiohttp ships its own binding of the same parser): status line, headers,
Content-Length and chunked framing, chunk sizes, trailers, keep-alive, and the refusals
(Transfer-Encoding with Content-Length, duplicate lengths, bad chunk sizes) are llhttp's.
This module only queues the body pieces llhttp hands over, with flow control (reading
pauses above `HIGH_WATER` unread bytes and resumes as the reader takes them, whatever the
chunk sizes), bounds what llhttp's binding accumulates (a header line is held until it
ends, so bytes are fed in slices and at most `MAX_HEAD_BYTES` of them may pass without the
head completing or a body piece arriving), and keeps one lazily moved timer per connection
for read timeouts.

No policy: bytes in, bytes out, and three kinds of trouble (TimeoutError, ConnectionError,
MalformedError, HeadTooLargeError among them) that the client maps to attempt outcomes.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Mapping
from typing import NamedTuple, cast

from httptools import HttpParserError, HttpResponseParser

MAX_HEAD_BYTES = 64 * 1024  # a response head (or trailers, or a chunk line) on the wire
_SLICE_BYTES = 16 * 1024  # fed to llhttp at a time: the head check's granularity
HIGH_WATER = 1024 * 1024  # stop reading the socket beyond this much unread body
_LOW_WATER = HIGH_WATER // 4  # ...and read again once the reader is below this
_FRAMING = (b"content-length", b"transfer-encoding")


class MalformedError(Exception):
    """The engine's bytes are not HTTP/1.x as llhttp reads it (or not what we asked for)."""


class HeadTooLargeError(MalformedError):
    """More than MAX_HEAD_BYTES arrived without the head (or trailers) ending."""

    def __init__(self) -> None:
        super().__init__(f"response head over {MAX_HEAD_BYTES} bytes")


class ResponseHead(NamedTuple):
    status: int
    content_type: str  # the media type alone, lower case ("application/octet-stream" if none)
    to_eof: bool  # no length, not chunked: the body ends with the connection


def _media_type(value: bytes) -> str:
    media = value.split(b";", 1)[0].strip().lower().decode("latin-1")
    return media or "application/octet-stream"


class Connection(asyncio.Protocol):
    """One TCP connection to an engine, one request at a time: `write` a request, then
    `response_head` and `piece` until None. llhttp calls the `on_*` methods from
    `data_received`."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.transport: asyncio.Transport | None = None
        self._parser = HttpResponseParser(self)
        self.closed = False  # the connection is gone (lost, or closed by us)
        self.broken = False  # ...and not cleanly: reset, an error, or bytes llhttp refused
        self.error: MalformedError | None = None
        self.received = False  # any byte since the last request was written
        self.idle_since = 0.0
        # The response to the request last written.
        self.head: ResponseHead | None = None
        self.complete = False  # llhttp saw its end
        self.keep_alive = False
        self._awaiting = False  # a request was written and its final response is not complete
        self._body: deque[bytes] = deque()
        self._queued = 0
        self._head_bytes = 0
        self._progress = 0  # heads and body pieces llhttp handed over (see `_feed`)
        self._loose = 0  # bytes fed since the last progress
        self._fields: dict[bytes, bytes] = {}
        self._paused = False
        self._waiter: asyncio.Future[None] | None = None
        # One timer per connection, moved lazily: waits only set `_deadline`; when the timer
        # fires early for a later deadline it re-arms itself (a wait per request would
        # otherwise cost a timer start and stop each).
        self._deadline = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0  # when the armed timer fires

    # --- asyncio.Protocol -----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's are not asyncio.Transport subclasses, so no isinstance).
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.received = True
        try:
            if len(data) <= _SLICE_BYTES:
                self._feed(data)
            else:
                view = memoryview(data)
                for at in range(0, len(data), _SLICE_BYTES):
                    self._feed(view[at : at + _SLICE_BYTES])
        except HttpParserError as err:
            cause = err.__context__
            self._fail(cause if isinstance(cause, MalformedError) else MalformedError(str(err)))
        except HeadTooLargeError as err:
            self._fail(err)
        if self._queued > HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def _feed(self, data: bytes | memoryview) -> None:
        """Feed llhttp; refuse once MAX_HEAD_BYTES went in with no head or body piece coming
        out (llhttp's binding holds an unfinished header line in memory, re-copied per feed:
        unchecked, one endless header line costs memory and quadratic CPU)."""
        progress = self._progress
        self._parser.feed_data(data)
        if self._progress != progress:
            self._loose = 0
            return
        self._loose += len(data)
        if self._loose > MAX_HEAD_BYTES:
            raise HeadTooLargeError()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.broken = self.broken or exc is not None
        self._wake()
        self._stop_timer()

    # --- llhttp callbacks -----------------------------------------------------------------

    def on_message_begin(self) -> None:
        if not self._awaiting:
            raise MalformedError("a response nobody asked for")
        self._fields.clear()
        self._head_bytes = 0

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.head is not None:
            return  # a trailer: dropped
        self._head_bytes += len(name) + len(value)
        if self._head_bytes > MAX_HEAD_BYTES:
            raise HeadTooLargeError()
        key = name.lower()
        if key == b"content-type" or key in _FRAMING:
            self._fields[key] = value

    def on_headers_complete(self) -> None:
        self._progress += 1
        status = self._parser.get_status_code()
        if status < 200:
            return  # an interim answer (100 Continue): its end is not the response's
        fields = self._fields
        content_type = _media_type(fields.get(b"content-type", b""))
        self.head = ResponseHead(status, content_type, self._ends_with_connection(status))

    def _ends_with_connection(self, status: int) -> bool:
        """No length and not chunked (RFC 9112, 6.3): what llhttp reads until the connection
        ends. llhttp decides the framing; this only tells a clean end from a cut, and says
        so only where llhttp agrees (it never keeps such a connection alive)."""
        fields = self._fields
        if status in (204, 304) or b"content-length" in fields or self._parser.should_keep_alive():
            return False
        codings = fields.get(b"transfer-encoding")
        return codings is None or codings.rsplit(b",", 1)[-1].strip().lower() != b"chunked"

    def on_body(self, body: bytes) -> None:
        self._progress += 1
        self._body.append(body)
        self._queued += len(body)

    def on_message_complete(self) -> None:
        self._progress += 1
        if self.head is None:
            return  # the end of an interim answer
        self.complete = True
        self._awaiting = False
        self.keep_alive = self._parser.should_keep_alive()

    # --- the client's side ----------------------------------------------------------------

    def write(self, data: bytes) -> None:
        if self.closed or self.transport is None or self.transport.is_closing():
            raise ConnectionResetError("the connection is closed")
        self.received = False
        self._loose = 0
        self.head = None
        self.complete = self.keep_alive = False
        self._awaiting = True
        self.transport.write(data)

    async def response_head(self, timeout_s: float, until: float | None = None) -> ResponseHead:
        """The final response head; ConnectionError when the connection ends first,
        MalformedError on bytes llhttp refuses, TimeoutError after `timeout_s` of silence or
        at loop time `until`."""
        while self.head is None:
            if self.error is not None:
                raise self.error
            if self.closed:
                raise ConnectionResetError("closed before the response head")
            await self.wait(timeout_s, until)
        return self.head

    async def piece(self, timeout_s: float, until: float | None = None) -> bytes | None:
        """The next piece of the body as it came off the wire; None at its end (waits as
        `response_head` does)."""
        while True:
            if self._body:
                return self._take()
            if self.complete:
                return None
            if self.error is not None:
                raise self.error
            if self.closed:
                if self.head is not None and self.head.to_eof and not self.broken:
                    self.complete = True  # the end of the connection was the end of the body
                    return None
                raise ConnectionResetError("closed mid-body")
            await self.wait(timeout_s, until)

    def whole_body(self) -> bytes | None:
        """The body if it has all arrived (the usual small answer), else None."""
        if not self.complete:
            return None
        body = b"".join(self._body)
        self._body.clear()
        self._unqueue(len(body))
        return body

    def _take(self) -> bytes:
        piece = self._body.popleft()
        self._unqueue(len(piece))
        return piece

    def _unqueue(self, n: int) -> None:
        self._queued -= n
        if self._paused and self._queued < _LOW_WATER and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()

    def reusable(self) -> bool:
        """The response was read to its end, the engine keeps the connection, nothing else
        arrived, and it is still open."""
        transport = self.transport
        return (
            self.complete
            and self.keep_alive
            and not self._body
            and self.error is None
            and not self.closed
            and transport is not None
            and not transport.is_closing()
        )

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.close()
        self.closed = True
        self._stop_timer()

    # --- waiting --------------------------------------------------------------------------

    def _fail(self, err: MalformedError) -> None:
        self.error = err
        self.broken = True
        if self.transport is not None:
            self.transport.abort()

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self, timeout_s: float, until: float | None = None) -> None:
        """Until more bytes arrive or the connection ends; TimeoutError after `timeout_s`, or
        at loop time `until` when that is sooner (the attempt's own limit: moves the one
        timer, arms none)."""
        if self.closed:
            return
        loop = self._loop
        deadline = loop.time() + timeout_s
        if until is not None and until < deadline:
            deadline = until
        self._deadline = deadline
        if self._timer is None or deadline < self._timer_at:
            # None armed, or armed for later (a stream's read timeout, then a new limit).
            if self._timer is not None:
                self._timer.cancel()
            self._arm(deadline)
        waiter = self._waiter = loop.create_future()
        try:
            await waiter
        finally:
            self._waiter = None

    def _on_timer(self) -> None:
        self._timer = None
        waiter = self._waiter
        if waiter is None or waiter.done():
            return  # nobody waits: no timer until the next wait
        if self._loop.time() >= self._deadline:
            waiter.set_exception(TimeoutError())
        else:
            self._arm(self._deadline)

    def _arm(self, at: float) -> None:
        self._timer = self._loop.call_at(at, self._on_timer)
        self._timer_at = at

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def request_bytes(
    host: str, target: str, headers: Mapping[str, str], body: bytes, method: str = "POST"
) -> bytes:
    """A request (POST by default) with a Content-Length body, also 0 for a GET; header
    values with CR or LF are refused."""
    lines = [f"{method} {target} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {len(body)}\r\n"]
    for name, value in headers.items():
        if "\r" in value or "\n" in value or "\r" in name or "\n" in name:
            raise ValueError(f"newline in header {name!r}")
        lines.append(f"{name}: {value}\r\n")
    lines.append("\r\n")
    return "".join(lines).encode("utf-8") + body
