"""A lean HTTP/1.1 client for engine calls: the `UpstreamClient` port over asyncio protocols.

aiohttp's ClientSession costs about 110 us of CPU per request on uvloop (request and response
objects, header multidicts, tracing hooks, cookie jar, connector bookkeeping); a keep-alive
HTTP/1.1 exchange with a known engine needs much less (`make bench` compares the two, see
docs/benchmarks.md). This adapter speaks exactly that: POST (or GET) with Content-Length,
responses parsed by llhttp (`http1_wire`), a keep-alive pool per host, the connection limits of the
aiohttp connector (`connector_limit` in all, `connector_limit_per_host` per engine), and the
same outcome taxonomy as the aiohttp adapter (connect failures, connect / first-byte / read
timeouts, broken streams). Closing a response that was not read to the end closes its
connection, which aborts the engine's work. https URLs go to the fallback client (the aiohttp
adapter).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Literal, Protocol
from urllib.parse import urlsplit

from data_plane.outcome import ConnectFailed, ResponseTooLarge, StreamBroken, Timeout
from data_plane.upstream.http1_wire import (
    MAX_HEAD_BYTES,
    Connection,
    HeadTooLargeError,
    MalformedError,
    ResponseHead,
    request_bytes,
)
from data_plane.upstream.port import (
    AttemptError,
    LimitReachedError,
    SessionLimits,
    UpstreamClient,
    UpstreamRequest,
    UpstreamResponse,
    gap_error,
    limit_until,
    within,
)

IDLE_TIMEOUT_S = 15.0  # a pooled connection idle longer is closed (aiohttp's keep-alive default)
_Target = tuple[str, str, int, str, str]  # scheme, host, port, Host header, request target


def _target(url: str) -> _Target:
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return parts.scheme, host, port, f"{host}:{port}", path


def _too_large(part: Literal["head", "body"], limit_bytes: int) -> AttemptError:
    return AttemptError(ResponseTooLarge(part, limit_bytes), f"response {part} too large")


def _refused_head(err: MalformedError) -> AttemptError:
    """A head llhttp refused (not HTTP as it reads it: counted as a failed connect), or one
    past the head limit."""
    if isinstance(err, HeadTooLargeError):
        return _too_large("head", MAX_HEAD_BYTES)
    return AttemptError(ConnectFailed(), "MalformedError")


def _passed(until: float | None) -> bool:
    """Has the attempt's limit (loop time `until`) passed? (A timer fires at its deadline.)"""
    return until is not None and asyncio.get_running_loop().time() >= until


class _Slots:
    """A connection limit (connections in use, of all engines or of one): a counter and a queue
    of waiters."""

    def __init__(self, limit: int) -> None:
        self._free = limit
        self._waiters: deque[asyncio.Future[None]] = deque()

    def free(self) -> bool:
        """Would `take` return at once?"""
        return self._free > 0 and not self._waiters

    async def take(self) -> None:
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self.give()  # handed a slot just as we were cancelled: pass it on
            raise

    def give(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._free += 1


class _Response:
    """A response whose head has arrived; the body is read or streamed, then `close`d."""

    __slots__ = (
        "_client",
        "_conn",
        "_done",
        "_gap_s",
        "_head",
        "_key",
        "_read_s",
        "_released",
        "_until",
    )

    def __init__(
        self,
        client: Http1Upstream,
        key: tuple[str, int],
        conn: Connection,
        head: ResponseHead,
        read_s: float,
        until: float | None,
        gap_s: float | None = None,
    ) -> None:
        self._client, self._key, self._conn, self._head = client, key, conn, head
        self._read_s = read_s
        self._until = until  # the attempt's limit: the whole body, or a stream's first chunk
        self._gap_s = gap_s  # the engine's gap limit (`UpstreamRequest.gap_s`)
        self._done = False
        self._released = False

    @property
    def status(self) -> int:
        return self._head.status

    @property
    def content_type(self) -> str:
        return self._head.content_type

    async def read(self) -> bytes:
        """The whole body; AttemptError(ResponseTooLarge) as soon as more than the session's
        `max_body_bytes` arrived (flow control keeps the rest on the socket)."""
        cap = self._client.max_body_bytes
        body = self._conn.whole_body()
        if body is not None:
            if len(body) > cap:
                raise _too_large("body", cap)
            self._done = True  # the whole body is already here (the usual small answer)
            return body
        pieces: list[bytes] = []
        size = 0
        async with aclosing(self._pieces(whole=True)) as stream:
            async for piece in stream:
                size += len(piece)
                if size > cap:
                    raise _too_large("body", cap)
                pieces.append(piece)
        return b"".join(pieces)

    def chunks(self) -> AsyncGenerator[bytes, None]:
        return self._pieces(whole=False)

    async def _pieces(self, whole: bool) -> AsyncGenerator[bytes, None]:
        """The body as it arrives; the attempt's limit holds for all of it (`whole`) or for
        the first piece, the gap limit for every wait after the first piece. Silence is timed
        only inside `conn.piece`, while we wait for the engine: pieces that came while the
        caller wrote to its client are there at once."""
        conn, read_s, until, gap_s = self._conn, self._read_s, self._until, self._gap_s
        quiet_s = read_s if gap_s is None else min(read_s, gap_s)
        wait_s = read_s  # the first piece: an engine may send its head before it works
        try:
            while (piece := await conn.piece(wait_s, until)) is not None:
                wait_s = quiet_s
                if not whole:
                    until = None
                yield piece
        except TimeoutError as err:
            if _passed(until):
                raise LimitReachedError() from err
            if wait_s < read_s:
                raise gap_error() from err
            raise AttemptError(Timeout("read"), "TimeoutError") from err
        except (MalformedError, ConnectionError) as err:
            raise AttemptError(StreamBroken(), type(err).__name__) from err
        self._done = True

    def close(self) -> None:
        """Idempotent. Back to the pool when read to the end on a reusable connection; else
        the connection is closed (the engine sees the client go and stops)."""
        if self._released:
            return
        self._released = True
        conn = self._conn
        if self._done and conn.reusable():
            self._client.put_back(self._key, conn)
        else:
            conn.close()
        self._client.release(self._key)


class Fallback(UpstreamClient, Protocol):
    """The client for other schemes (https): opened and closed with this one."""

    def open(self) -> None: ...

    async def close(self) -> None: ...


class Http1Upstream:
    """UpstreamClient over plain asyncio connections, opened and closed by the app's
    cleanup context; `fallback` serves schemes other than http."""

    def __init__(self, limits: SessionLimits, fallback: Fallback) -> None:
        self._limits = limits
        self._fallback = fallback
        self._targets: dict[str, _Target] = {}
        self._idle: dict[tuple[str, int], list[Connection]] = {}
        self._slots = _Slots(limits.connector_limit)
        self._host_slots: dict[tuple[str, int], _Slots] = {}

    @property
    def max_body_bytes(self) -> int:
        return self._limits.max_body_bytes

    def open(self) -> None:
        self._fallback.open()

    async def close(self) -> None:
        for conns in self._idle.values():
            for conn in conns:
                conn.close()
        self._idle.clear()
        await self._fallback.close()

    async def _acquire(self, key: tuple[str, int], until: float | None) -> None:
        """A connection slot for `key` by loop time `until` (LimitReachedError after it)."""
        if until is None or self._try_acquire(key):
            await self._acquire_waiting(key)
            return
        await within(until, self._acquire_waiting(key))

    def _try_acquire(self, key: tuple[str, int]) -> bool:
        """Take the slots for `key` if none has to be waited for (most attempts): then
        `_acquire_waiting` has nothing to wait for (a slot given back meanwhile changes
        nothing), and no timer is armed."""
        host = self._host_slots.get(key)
        return self._slots.free() and (host is None or host.free())

    async def _acquire_waiting(self, key: tuple[str, int]) -> None:
        """A connection slot for `key`: first the engine's own (when capped), then one of all."""
        per_host = self._limits.connector_limit_per_host
        if not per_host:
            await self._slots.take()
            return
        host = self._host_slots.get(key)
        if host is None:
            host = self._host_slots[key] = _Slots(per_host)
        await host.take()
        try:
            await self._slots.take()
        except BaseException:
            host.give()
            raise

    def release(self, key: tuple[str, int]) -> None:
        self._slots.give()
        host = self._host_slots.get(key)
        if host is not None:
            host.give()

    def put_back(self, key: tuple[str, int], conn: Connection) -> None:
        conn.idle_since = time.monotonic()
        self._idle.setdefault(key, []).append(conn)

    def _pooled(self, key: tuple[str, int]) -> Connection | None:
        conns = self._idle.get(key)
        now = time.monotonic()
        while conns:
            conn = conns.pop()
            if conn.reusable() and now - conn.idle_since < IDLE_TIMEOUT_S:
                return conn
            conn.close()
        return None

    async def _connect(self, host: str, port: int, until: float | None) -> Connection:
        loop = asyncio.get_running_loop()
        at = loop.time() + self._limits.connect_timeout_s
        try:
            async with asyncio.timeout_at(at if until is None else min(at, until)):
                _, conn = await loop.create_connection(lambda: Connection(loop), host, port)
        except TimeoutError as err:
            if _passed(until):
                raise LimitReachedError() from err
            raise AttemptError(Timeout("connect"), "TimeoutError") from err
        except OSError as err:  # refused, unreachable, DNS
            raise AttemptError(ConnectFailed(), type(err).__name__) from err
        return conn

    async def send(self, request: UpstreamRequest) -> UpstreamResponse:
        target = self._targets.get(request.url)
        if target is None:
            target = self._targets[request.url] = _target(request.url)
        scheme, host, port, host_header, path = target
        if scheme != "http":
            return await self._fallback.send(request)
        data = request_bytes(host_header, path, request.headers, request.body, request.method)
        key = (host, port)
        until = limit_until(request.limit_s)
        await self._acquire(key, until)
        try:
            return await self._exchange(key, data, until, request.gap_s)
        except BaseException:
            self.release(key)
            raise

    async def _exchange(
        self, key: tuple[str, int], data: bytes, until: float | None, gap_s: float | None
    ) -> _Response:
        """Send on a pooled connection (once more on a fresh one when the pooled one turns out
        closed before any answer: the engine never saw the request), wait for the head."""
        limits = self._limits
        for reused in (True, False):
            conn = self._pooled(key) if reused else None
            if reused and conn is None:
                continue
            if conn is None:
                conn = await self._connect(*key, until)
            try:
                conn.write(data)
                head = await conn.response_head(limits.read_timeout_s, until)
            except ConnectionError as err:
                conn.close()
                if reused and not conn.received:
                    continue
                raise AttemptError(ConnectFailed(), type(err).__name__) from err
            except TimeoutError as err:
                conn.close()
                if _passed(until):
                    raise LimitReachedError() from err
                raise AttemptError(Timeout("first_byte"), "TimeoutError") from err
            except MalformedError as err:
                conn.close()
                raise _refused_head(err) from err
            except BaseException:
                conn.close()  # cancelled: the engine sees us go
                raise
            return _Response(self, key, conn, head, limits.read_timeout_s, until, gap_s)
        raise AssertionError("unreachable: the fresh connection either answers or raises")
