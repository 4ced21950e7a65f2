"""http1.py against real servers on loopback: framing, keep-alive, timeouts, failures, limits.

Raw servers write exact bytes, so each parser defect once found in the hand-written parser
(large chunks stalling, lax chunk sizes, `chunked` as a substring, Transfer-Encoding with
Content-Length, split reads) has a test here.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from multidict import CIMultiDict

from data_plane.outcome import ConnectFailed, ResponseTooLarge, StreamBroken, Timeout
from data_plane.upstream.http1 import Http1Upstream
from data_plane.upstream.http1_wire import HIGH_WATER, MAX_HEAD_BYTES, request_bytes
from data_plane.upstream.port import (
    AiohttpUpstream,
    AttemptError,
    LimitReachedError,
    SessionLimits,
    UpstreamRequest,
    UpstreamResponse,
)
from tests.support.redis_server import free_port

ServerFactory = Callable[[web.Application], Awaitable[TestServer]]
RawHandler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
BODY = b'{"model": "m", "messages": []}'


class NoFallback:
    """Stands in for the https client; records what it was asked."""

    def __init__(self) -> None:
        self.sent: list[UpstreamRequest] = []
        self.opened = self.closed = False

    def open(self) -> None:
        self.opened = True

    async def close(self) -> None:
        self.closed = True

    async def send(self, request: UpstreamRequest) -> UpstreamResponse:
        self.sent.append(request)
        raise AttemptError(ConnectFailed(), "no https here")


MakeClient = Callable[..., Http1Upstream]


@pytest.fixture
async def client() -> AsyncIterator[MakeClient]:
    """Clients closed (pooled connections included) when the test ends."""
    made: list[Http1Upstream] = []

    def make(read_s: float = 5.0, limit: int = 100, per_host: int = 0) -> Http1Upstream:
        limits = SessionLimits(limit, per_host, 2.0, read_s, 30.0)
        made.append(Http1Upstream(limits, NoFallback()))
        return made[-1]

    yield make
    for up in made:
        await up.close()


def post(url: str, headers: dict[str, str] | None = None) -> UpstreamRequest:
    return UpstreamRequest(url, BODY, {"Content-Type": "application/json", **(headers or {})})


@contextlib.asynccontextmanager
async def raw_server(handle: RawHandler) -> AsyncIterator[str]:
    """A bare TCP server speaking whatever `handle` writes; on exit every connection it
    still has is closed and its handler cancelled."""
    running: set[asyncio.Task[None]] = set()

    async def run(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        running.add(task)
        try:
            await handle(reader, writer)
        finally:
            running.discard(task)
            writer.close()

    server = await asyncio.start_server(run, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/v1/chat/completions"
    finally:
        server.close()
        for task in list(running):
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        await server.wait_closed()


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    return head + await reader.readexactly(length)


async def until_hung_up(reader: asyncio.StreamReader) -> None:
    """Say nothing more until the client closes the connection: the client's own timeout or
    limit ends the exchange, never a sleep here that a loaded machine could outlast."""
    with contextlib.suppress(ConnectionError):
        await reader.read()


async def answers_ok(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A keep-alive engine answering `ok` to every request on the connection."""
    with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
        while True:
            await read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()


async def test_json_answers_keep_alive_and_exact_request_bytes(
    aiohttp_server: ServerFactory,
    client: MakeClient,
) -> None:
    seen: list[tuple[str, bytes, CIMultiDict[str], object]] = []

    async def chat(request: web.Request) -> web.Response:
        body = await request.read()
        seen.append((request.path_qs, body, request.headers.copy(), request.transport))
        return web.json_response({"ok": True}, headers={"X-Engine": "1"})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    server = await aiohttp_server(app)
    up = client()
    url = str(server.make_url("/v1/chat/completions?x=1"))
    for _ in range(3):
        resp = await up.send(post(url, {"X-Request-Id": "r1", "traceparent": "00-a-b-01"}))
        assert (resp.status, resp.content_type) == (200, "application/json")
        assert await resp.read() == b'{"ok": true}'
        resp.close()
        resp.close()  # idempotent
    assert [s[0] for s in seen] == ["/v1/chat/completions?x=1"] * 3
    assert all(body == BODY for _, body, _, _ in seen)
    headers = seen[0][2]
    assert headers["Host"] == f"127.0.0.1:{server.port}"
    assert (headers["X-Request-Id"], headers["traceparent"]) == ("r1", "00-a-b-01")
    assert headers["Content-Length"] == str(len(BODY))
    assert "Accept-Encoding" not in headers  # bodies pass through as the engine sent them
    assert len({id(transport) for *_, transport in seen}) == 1  # one kept-alive connection


async def test_chunked_streams_arrive_piece_by_piece(
    aiohttp_server: ServerFactory, client: MakeClient
) -> None:
    async def stream(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        for i in range(3):
            await resp.write(f"data: {i}\n\n".encode())
            await asyncio.sleep(0.01)
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", stream)
    server = await aiohttp_server(app)
    up = client()
    resp = await up.send(post(str(server.make_url("/v1/chat/completions"))))
    assert resp.content_type == "text/event-stream"
    pieces = [piece async for piece in resp.chunks()]
    assert b"".join(pieces) == b"data: 0\n\ndata: 1\n\ndata: 2\n\n"
    assert len(pieces) >= 2  # not buffered to the end
    resp.close()
    again = await up.send(post(str(server.make_url("/v1/chat/completions"))))
    assert (await again.read()).startswith(b"data: 0")
    again.close()


async def test_error_statuses_are_answers_not_failures(
    aiohttp_server: ServerFactory, client: MakeClient
) -> None:
    async def busy(request: web.Request) -> web.Response:
        return web.Response(status=503, text="busy")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", busy)
    server = await aiohttp_server(app)
    up = client()
    resp = await up.send(post(str(server.make_url("/v1/chat/completions"))))
    assert (resp.status, await resp.read()) == (503, b"busy")
    resp.close()


async def test_a_refused_connection_is_connect_failed(client: MakeClient) -> None:
    up = client()
    with pytest.raises(AttemptError) as err:
        await up.send(post(f"http://127.0.0.1:{free_port()}/v1/chat/completions"))
    assert isinstance(err.value.outcome, ConnectFailed)


async def test_silence_before_the_head_is_a_first_byte_timeout(client: MakeClient) -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await until_hung_up(reader)

    async with raw_server(silent) as url:
        up = client(read_s=0.2)
        with pytest.raises(AttemptError) as err:
            await up.send(post(url))
        assert err.value.outcome == Timeout("first_byte")


async def test_silence_mid_body_is_a_read_timeout_and_a_cut_is_a_broken_stream(
    client: MakeClient,
) -> None:
    async def stalls(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
        await writer.drain()
        await until_hung_up(reader)

    async def cuts(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n5\r\nde")
        await writer.drain()
        writer.close()

    for handler, outcome in ((stalls, Timeout("read")), (cuts, StreamBroken())):
        async with raw_server(handler) as url:
            up = client(read_s=0.2)
            resp = await up.send(post(url))
            with pytest.raises(AttemptError) as err:
                await resp.read()
            assert err.value.outcome == outcome
            resp.close()


async def test_framings_interim_answers_and_connection_close(client: MakeClient) -> None:
    answers = [
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2;x=y\r\nok\r\n0\r\nT: 1\r\n\r\n",
        b"HTTP/1.1 204 No Content\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.0 200 OK\r\n\r\nto the end",
    ]
    connections = 0

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while answers:
                await read_request(reader)
                reply = answers.pop(0)
                writer.write(reply)
                await writer.drain()
                if b"close" in reply or b"HTTP/1.0" in reply:
                    break
        writer.close()

    async with raw_server(answer) as url:
        up = client()
        bodies = []
        for _ in range(5):
            resp = await up.send(post(url))
            bodies.append((resp.status, await resp.read()))
            resp.close()
    assert bodies == [(200, b"ok"), (200, b"ok"), (204, b""), (200, b"ok"), (200, b"to the end")]
    assert connections == 2  # a new one only after `Connection: close`


async def test_a_pooled_connection_the_engine_dropped_is_replaced_quietly(
    client: MakeClient,
) -> None:
    served = 0

    async def once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal served
        await read_request(reader)
        served += 1
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        await reader.read(1)  # the next request arrives: drop it unanswered
        writer.transport.abort()

    async with raw_server(once) as url:
        up = client()
        for _ in range(3):
            resp = await up.send(post(url))
            assert await resp.read() == b"ok"
            resp.close()
    assert served == 3


async def test_closing_an_unread_answer_hangs_up_on_the_engine(client: MakeClient) -> None:
    gone = asyncio.Event()

    async def streams(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Streams tokens for as long as the client listens; `gone` only on its hang-up."""
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        with contextlib.suppress(ConnectionError):
            while not reader.at_eof():
                writer.write(b"5\r\ntoken\r\n")
                await writer.drain()
                await asyncio.sleep(0.01)
        gone.set()

    async with raw_server(streams) as url:
        up = client()
        resp = await up.send(post(url))
        async for _ in resp.chunks():
            break
        resp.close()
        await asyncio.wait_for(gone.wait(), timeout=30)  # a safety net: the hang-up sets it


async def test_the_connection_limit_queues_sends(client: MakeClient) -> None:
    async with raw_server(answers_ok) as url:
        up = client(limit=1)
        first = await up.send(post(url))
        second = asyncio.create_task(up.send(post(url)))
        await asyncio.sleep(0.05)
        assert not second.done()
        first.close()
        resp = await asyncio.wait_for(second, timeout=5)
        assert await resp.read() == b"ok"
        resp.close()
        third = asyncio.create_task(up.send(post(url)))  # cancelled while queued...
        await asyncio.sleep(0)
        third.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await third
        resp = await asyncio.wait_for(up.send(post(url)), timeout=5)  # ...frees nothing twice
        resp.close()


async def test_https_goes_to_the_fallback_client() -> None:
    fallback = NoFallback()
    up = Http1Upstream(SessionLimits(10, 0, 1.0, 1.0, 10.0), fallback)
    up.open()
    with pytest.raises(AttemptError):
        await up.send(post("https://engine.example/v1/chat/completions"))
    assert [r.url for r in fallback.sent] == ["https://engine.example/v1/chat/completions"]
    await up.close()
    assert fallback.opened
    assert fallback.closed


def test_request_bytes_refuse_header_injection() -> None:
    with pytest.raises(ValueError, match="newline"):
        request_bytes("h:1", "/", {"X-Bad": "a\r\nInjected: 1"}, b"")
    assert request_bytes("h:1", "/p", {"A": "b"}, b"xy") == (
        b"POST /p HTTP/1.1\r\nHost: h:1\r\nContent-Length: 2\r\nA: b\r\n\r\nxy"
    )
    assert request_bytes("h:1", "/metrics", {}, b"", "GET") == (
        b"GET /metrics HTTP/1.1\r\nHost: h:1\r\nContent-Length: 0\r\n\r\n"
    )


def answers_with(*replies: bytes, close: bool = False) -> RawHandler:
    """A server that answers each request on a connection with the next of `replies` as
    written (then closes, when `close`), and keeps the connection open otherwise."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            for reply in replies:
                await read_request(reader)
                writer.write(reply)
                await writer.drain()
            if not close:
                await reader.read()

    return answer


async def test_a_chunk_over_a_mebibyte_arrives_without_stalling(client: MakeClient) -> None:
    big = bytes(range(256)) * (3 * HIGH_WATER // 256)  # three times the read-pause mark
    reply = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    reply += f"{len(big):x}\r\n".encode() + big + b"\r\n0\r\n\r\n"
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    async with raw_server(answers_with(reply, ok)) as url:
        up = client(read_s=1.0)
        resp = await up.send(post(url))
        assert await resp.read() == big  # the old parser paused reading and timed out here
        resp.close()
        again = await up.send(post(url))  # the same kept-alive connection
        assert await again.read() == b"ok"
        again.close()


@pytest.mark.parametrize("size", [b"0x10", b"1_0", b"+10", b" 10", b"-10", b"10 0"])
async def test_chunk_sizes_are_hex_digits_only(client: MakeClient, size: bytes) -> None:
    reply = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    reply += size + b"\r\n" + b"x" * 16 + b"\r\n0\r\n\r\n"
    async with raw_server(answers_with(reply)) as url:
        up = client(read_s=1.0)
        resp = await up.send(post(url))
        with pytest.raises(AttemptError) as err:
            await resp.read()
        assert err.value.outcome == StreamBroken()
        resp.close()


async def test_chunked_counts_only_as_the_final_transfer_coding(client: MakeClient) -> None:
    # Not chunked: the body is the bytes up to the end of the connection (RFC 9112, 6.3).
    raw = b"2\r\nok\r\n0\r\n\r\n"
    replies = [
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: notchunked\r\n\r\n" + raw, raw),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n" + raw, raw),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, Chunked\r\n\r\n" + raw, b"ok"),
    ]
    for reply, body in replies:
        async with raw_server(answers_with(reply, close=True)) as url:
            up = client(read_s=1.0)
            resp = await up.send(post(url))
            assert await resp.read() == body
            resp.close()


@pytest.mark.parametrize(
    "head",
    [
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: -2\r\n\r\n",
        b"HTTP/1.1 abc OK\r\n\r\n",
        b"SMTP 220 hi\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
    ],
)
async def test_heads_that_frame_ambiguously_or_badly_are_refused(
    client: MakeClient, head: bytes
) -> None:
    reply = head + b"2\r\nok\r\n0\r\n\r\n"
    async with raw_server(answers_with(reply)) as url:
        up = client(read_s=1.0)
        with pytest.raises(AttemptError) as err:
            await up.send(post(url))
        assert isinstance(err.value.outcome, ConnectFailed)
        assert "MalformedError" in str(err.value)


@pytest.mark.parametrize(
    "head",
    [
        b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n",  # one line
        b"HTTP/1.1 200 OK\r\n" + b"X-Many: aaaaaaaaaaaa\r\n" * 4000 + b"\r\n",  # many
    ],
)
async def test_heads_over_the_limit_are_refused_as_too_large(
    client: MakeClient, head: bytes
) -> None:
    async with raw_server(answers_with(head + b"2\r\nok\r\n0\r\n\r\n")) as url:
        with pytest.raises(AttemptError) as err:
            await client(read_s=1.0).send(post(url))
        assert err.value.outcome == ResponseTooLarge("head", MAX_HEAD_BYTES)


async def test_answers_split_across_reads_byte_by_byte(client: MakeClient) -> None:
    replies = [
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\n"
        b"Trailer: x\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: application/json\r\n\r\n[1,2]",
    ]

    async def trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            for reply in replies:
                await read_request(reader)
                for i in range(len(reply)):
                    writer.write(reply[i : i + 1])
                    await writer.drain()
                    await asyncio.sleep(0)
            await reader.read()

    async with raw_server(trickle) as url:
        up = client(read_s=2.0)
        resp = await up.send(post(url))
        assert (resp.status, resp.content_type) == (200, "text/event-stream")
        assert b"".join([piece async for piece in resp.chunks()]) == b"hello world"
        resp.close()
        resp = await up.send(post(url))
        assert (resp.content_type, await resp.read()) == ("application/json", b"[1,2]")
        resp.close()


async def test_bytes_after_the_answer_retire_the_connection(client: MakeClient) -> None:
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    connections = 0

    async def extra(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            await read_request(reader)
            writer.write(ok + ok)  # an answer nobody asked for rides along
            await writer.drain()
            await reader.read()

    async with raw_server(extra) as url:
        up = client()
        for _ in range(2):
            resp = await up.send(post(url))
            assert await resp.read() == b"ok"
            resp.close()
    assert connections == 2


async def test_the_per_host_limit_queues_sends_to_that_host_only(client: MakeClient) -> None:
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    async with (
        raw_server(answers_with(ok, ok, ok)) as url_a,
        raw_server(answers_with(ok, ok, ok)) as url_b,
    ):
        up = client(limit=10, per_host=1)
        first = await up.send(post(url_a))
        queued = asyncio.create_task(up.send(post(url_a)))
        other = await asyncio.wait_for(up.send(post(url_b)), timeout=5)  # another engine
        assert await other.read() == b"ok"
        other.close()
        await asyncio.sleep(0.05)
        assert not queued.done()  # the old client ignored connector_limit_per_host
        assert await first.read() == b"ok"
        first.close()
        resp = await asyncio.wait_for(queued, timeout=5)
        assert await resp.read() == b"ok"
        resp.close()


def limited(url: str, limit_s: float) -> UpstreamRequest:
    return UpstreamRequest(url, BODY, {"Content-Type": "application/json"}, limit_s)


async def test_the_attempt_limit_covers_the_head_and_a_whole_body(client: MakeClient) -> None:
    """`limit_s` passes before the head, or before the end of a body that is read: the
    attempt's own limit (LimitReachedError), not the read timeout (which is far away here)."""

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await until_hung_up(reader)

    async def trickles(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        with contextlib.suppress(ConnectionError):
            while not reader.at_eof():  # a piece every 50 ms, never the end
                writer.write(b"1\r\na\r\n")
                await writer.drain()
                await asyncio.sleep(0.05)

    up = client(read_s=5.0)
    async with raw_server(silent) as url:
        started = asyncio.get_running_loop().time()
        with pytest.raises(LimitReachedError):
            await up.send(limited(url, 0.2))
        assert asyncio.get_running_loop().time() - started < 2.0
    async with raw_server(trickles) as url:
        resp = await up.send(limited(url, 0.3))  # the head comes at once
        with pytest.raises(LimitReachedError):
            await resp.read()  # a piece every 50 ms: no read timeout, but never the end
        resp.close()


async def test_the_attempt_limit_covers_only_the_first_chunk_of_a_stream(
    client: MakeClient,
) -> None:
    async def streams(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                await read_request(reader)
                writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                for _ in range(4):
                    writer.write(b"1\r\na\r\n")
                    await writer.drain()
                    await asyncio.sleep(0.1)
                writer.write(b"0\r\n\r\n")
                await writer.drain()

    up = client(read_s=5.0)
    async with raw_server(streams) as url:
        resp = await up.send(limited(url, 0.15))
        assert [piece async for piece in resp.chunks()] == [b"a"] * 4  # 0.4 s in all
        resp.close()


async def test_a_pooled_connection_keeps_a_sooner_limit_than_its_armed_timer(
    client: MakeClient,
) -> None:
    """A stream's later pieces leave the connection's timer armed at the read timeout; the
    next attempt on that connection with a short limit must still end at its limit."""
    answers = [
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n",
        b"1\r\nb\r\n0\r\n\r\n",
    ]

    async def first_streams_then_hangs(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await read_request(reader)
        for piece in answers:
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(0.05)
        await read_request(reader)  # the second attempt, on the same connection: no answer
        await until_hung_up(reader)

    up = client(read_s=30.0)
    async with raw_server(first_streams_then_hangs) as url:
        resp = await up.send(post(url))
        assert [piece async for piece in resp.chunks()] == [b"a", b"b"]
        resp.close()  # back to the pool, its timer armed ~30 s out
        started = asyncio.get_running_loop().time()
        with pytest.raises(LimitReachedError):
            await up.send(limited(url, 0.2))
        assert asyncio.get_running_loop().time() - started < 2.0


async def test_waiting_for_a_connection_slot_counts_against_the_limit(client: MakeClient) -> None:
    async with raw_server(answers_ok) as url:
        up = client(limit=1)
        first = await up.send(post(url))  # holds the only slot
        with pytest.raises(LimitReachedError):
            await up.send(limited(url, 0.1))
        first.close()
        resp = await asyncio.wait_for(up.send(limited(url, 1.0)), timeout=5)  # slot given back
        assert await resp.read() == b"ok"
        resp.close()


async def test_the_aiohttp_adapter_keeps_the_attempt_limit_too() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
        await writer.drain()
        await until_hung_up(reader)

    adapter = AiohttpUpstream(SessionLimits(10, 0, 2.0, 5.0, 30.0))
    adapter.open()
    try:
        async with raw_server(silent) as url:
            resp = await adapter.send(limited(url, 0.2))  # the head comes at once
            with pytest.raises(LimitReachedError):
                await resp.read()
            resp.close()
    finally:
        await adapter.close()
