"""HTTP/1.1 on the wire for `http1`: the connection protocol, request bytes, response framing.

No policy: bytes in, bytes out, and three kinds of trouble (TimeoutError, ConnectionError,
MalformedError) that the client maps to attempt outcomes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Mapping
from typing import NamedTuple, cast

MAX_HEAD_BYTES = 64 * 1024  # status line + headers
MAX_LINE_BYTES = 8 * 1024  # a chunk-size or trailer line
_HIGH_WATER = 1024 * 1024  # stop reading the socket beyond this much unread data
_NO_BODY = frozenset({204, 304})


class MalformedError(Exception):
    """The engine's bytes are not HTTP/1.x as we read it."""


class ResponseHead(NamedTuple):
    status: int
    content_type: str  # the media type alone, lower case ("application/octet-stream" if none)
    length: int | None  # body bytes; None = chunked, or until the connection closes
    chunked: bool
    keep_alive: bool


class Connection(asyncio.Protocol):
    """One TCP connection to an engine: received bytes wait in `buffer` until read."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.closed = False  # the connection is gone (lost, or closed by us)
        self.broken = False  # ...and not cleanly: reset or an error
        self.received = False  # any byte since the last request was written
        self.idle_since = 0.0
        self._waiter: asyncio.Future[None] | None = None
        self._paused = False
        # One timer per connection, moved lazily: waits only set `_deadline`; when the timer
        # fires early for a later deadline it re-arms itself (a wait per request would
        # otherwise cost a timer start and stop each).
        self._deadline = 0.0
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's are not asyncio.Transport subclasses, so no isinstance).
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        self.received = True
        if len(self.buffer) > _HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.broken = self.broken or exc is not None
        self._wake()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self, timeout_s: float) -> None:
        """Until more bytes arrive or the connection ends; TimeoutError after `timeout_s`."""
        if self.closed:
            return
        loop = self._loop
        self._deadline = loop.time() + timeout_s
        if self._timer is None:
            self._timer = loop.call_at(self._deadline, self._on_timer)
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
            self._timer = self._loop.call_at(self._deadline, self._on_timer)

    def write(self, data: bytes) -> None:
        if self.closed or self.transport is None or self.transport.is_closing():
            raise ConnectionResetError("the connection is closed")
        self.received = False
        self.transport.write(data)

    def take(self, n: int) -> bytes:
        data = bytes(self.buffer[:n])
        del self.buffer[:n]
        if self._paused and len(self.buffer) < _HIGH_WATER // 4 and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return data

    def reusable(self) -> bool:
        """Idle and healthy: nothing unread, still open."""
        transport = self.transport
        return not (self.closed or self.buffer or transport is None or transport.is_closing())

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.close()
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def line(self, timeout_s: float) -> bytes:
        """The next CRLF-terminated line, without its CRLF."""
        while (end := self.buffer.find(b"\r\n")) < 0:
            if len(self.buffer) > MAX_LINE_BYTES:
                raise MalformedError("line too long")
            if self.closed:
                raise ConnectionResetError("closed mid-line")
            await self.wait(timeout_s)
        line = self.take(end + 2)
        return line[:-2]

    async def exactly(self, n: int, timeout_s: float) -> bytes:
        while len(self.buffer) < n:
            if self.closed:
                raise ConnectionResetError("closed mid-body")
            await self.wait(timeout_s)
        return self.take(n)

    async def pieces(self, length: int | None, timeout_s: float) -> AsyncGenerator[bytes, None]:
        """A body of `length` bytes, or (None) up to the end of the connection, as it comes."""
        remaining = -1 if length is None else length
        while remaining:
            if self.buffer:
                piece = self.take(len(self.buffer) if remaining < 0 else remaining)
                remaining -= len(piece) if remaining > 0 else 0
                yield piece
            elif self.closed:
                if remaining > 0 or self.broken:
                    raise ConnectionResetError("closed mid-body")
                return
            else:
                await self.wait(timeout_s)


async def chunk_pieces(conn: Connection, timeout_s: float) -> AsyncGenerator[bytes, None]:
    """A chunked body's data, chunk by chunk (trailers are read and dropped)."""
    while True:
        size_line = await conn.line(timeout_s)
        try:
            size = int(size_line.split(b";", 1)[0].strip(), 16)
        except ValueError as err:
            raise MalformedError("bad chunk size") from err
        if size < 0:
            raise MalformedError("bad chunk size")
        if size == 0:
            while await conn.line(timeout_s):
                pass
            return
        data = await conn.exactly(size + 2, timeout_s)
        if data[-2:] != b"\r\n":
            raise MalformedError("chunk without CRLF")
        yield data[:-2]


def request_bytes(host: str, target: str, headers: Mapping[str, str], body: bytes) -> bytes:
    """A POST with a Content-Length body; header values with CR or LF are refused."""
    lines = [f"POST {target} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {len(body)}\r\n"]
    for name, value in headers.items():
        if "\r" in value or "\n" in value or "\r" in name or "\n" in name:
            raise ValueError(f"newline in header {name!r}")
        lines.append(f"{name}: {value}\r\n")
    lines.append("\r\n")
    return "".join(lines).encode("utf-8") + body


def _media_type(value: bytes) -> str:
    media = value.split(b";", 1)[0].strip().lower().decode("latin-1")
    return media or "application/octet-stream"


def parse_head(head: bytes) -> ResponseHead:
    """Status line and headers (without the blank line) -> how to read the body."""
    status_line, *header_lines = head.split(b"\r\n")
    parts = status_line.split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise MalformedError("bad status line")
    status = int(parts[1])
    fields: dict[bytes, bytes] = {}
    for line in header_lines:
        name, colon, value = line.partition(b":")
        if not colon or not name.strip():
            raise MalformedError("bad header line")
        key = name.strip().lower()
        value = value.strip()
        fields[key] = fields[key] + b", " + value if key in fields else value
    tokens = {t.strip() for t in fields.get(b"connection", b"").lower().split(b",")}
    keep_alive = b"close" not in tokens and (parts[0] != b"HTTP/1.0" or b"keep-alive" in tokens)
    content_type = _media_type(fields.get(b"content-type", b""))
    if b"chunked" in fields.get(b"transfer-encoding", b"").lower():
        return ResponseHead(status, content_type, None, True, keep_alive)
    if b"content-length" in fields:
        try:
            length = int(fields[b"content-length"])
        except ValueError as err:
            raise MalformedError("bad Content-Length") from err
        if length < 0:
            raise MalformedError("bad Content-Length")
        return ResponseHead(status, content_type, length, False, keep_alive)
    if status in _NO_BODY:
        return ResponseHead(status, content_type, 0, False, keep_alive)
    return ResponseHead(status, content_type, None, False, False)  # to the end: not reusable


async def read_head(conn: Connection, timeout_s: float) -> ResponseHead:
    """The response head (interim 1xx responses skipped); ConnectionError when the
    connection ends first, MalformedError on garbage, TimeoutError after `timeout_s` of
    silence."""
    while True:
        while (end := conn.buffer.find(b"\r\n\r\n")) < 0:
            if len(conn.buffer) > MAX_HEAD_BYTES:
                raise MalformedError("response head too large")
            if conn.closed:
                raise ConnectionResetError("closed before the response head")
            await conn.wait(timeout_s)
        head = parse_head(conn.take(end + 4)[:-4])
        if not 100 <= head.status < 200:
            return head
