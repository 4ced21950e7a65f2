"""The engine's gap limit in both upstream clients (`UpstreamRequest.gap_s`): silence after a
body's first piece (streamed or read whole) ends the attempt as `Timeout("gap")`; silence
while the caller is busy elsewhere (writing to a slow client) is never the engine's.

Raw servers on loopback write exact bytes; the read timeout is far away (5 s) throughout.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from data_plane.outcome import Timeout
from data_plane.upstream.http1 import Http1Upstream
from data_plane.upstream.port import (
    AiohttpUpstream,
    AttemptError,
    SessionLimits,
    UpstreamClient,
    UpstreamRequest,
)
from tests.component.data_plane.test_http1 import (
    NoFallback,
    raw_server,
    read_request,
    until_hung_up,
)

LIMITS = SessionLimits(10, 0, 2.0, 5.0, 30.0)
CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"


@pytest.fixture(params=["http1", "aiohttp"])
async def upstream(request: pytest.FixtureRequest) -> AsyncIterator[UpstreamClient]:
    if request.param == "http1":
        http1 = Http1Upstream(LIMITS, NoFallback())
        yield http1
        await http1.close()
        return
    adapter = AiohttpUpstream(LIMITS)
    adapter.open()
    yield adapter
    await adapter.close()


def gapped(url: str, gap_s: float) -> UpstreamRequest:
    return UpstreamRequest(url, b"{}", {"Content-Type": "application/json"}, gap_s=gap_s)


async def pieces(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, count: int, every_s: float
) -> None:
    """A chunked stream of `count` one-byte pieces, one every `every_s`, then its end."""
    await read_request(reader)
    writer.write(CHUNKED)
    for _ in range(count):
        writer.write(b"1\r\na\r\n")
        await writer.drain()
        await asyncio.sleep(every_s)
    writer.write(b"0\r\n\r\n")
    await writer.drain()


async def test_silence_after_the_first_chunk_is_a_gap(upstream: UpstreamClient) -> None:
    async def stalls(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(CHUNKED + b"1\r\na\r\n1\r\nb\r\n")
        await writer.drain()
        await until_hung_up(reader)

    async with raw_server(stalls) as url:
        resp = await upstream.send(gapped(url, 0.2))
        got: list[bytes] = []

        async def drain() -> None:
            async for chunk in resp.chunks():
                got.append(chunk)

        with pytest.raises(AttemptError) as caught:
            await drain()
        resp.close()
    assert b"".join(got) == b"ab"
    assert caught.value.outcome == Timeout("gap")


async def test_silence_in_a_body_being_read_is_a_gap(upstream: UpstreamClient) -> None:
    async def half(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
        await writer.drain()
        await until_hung_up(reader)

    async with raw_server(half) as url:
        resp = await upstream.send(gapped(url, 0.2))
        with pytest.raises(AttemptError) as caught:
            await resp.read()
        resp.close()
    assert caught.value.outcome == Timeout("gap")


async def test_an_engine_that_sends_its_head_before_it_works_is_not_cut(
    upstream: UpstreamClient,
) -> None:
    """The head at once, the body 0.4 s later (a server that flushes its head before the
    answer is ready): the wait for the first piece is the read timeout's, not the gap's."""

    async def late(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(0.4)
        writer.write(b"ok")
        await writer.drain()

    async with raw_server(late) as url:
        resp = await upstream.send(gapped(url, 0.1))
        assert await resp.read() == b"ok"
        resp.close()


async def test_a_slow_reader_is_not_an_engine_gap(upstream: UpstreamClient) -> None:
    """Pieces every 20 ms; the caller takes 0.3 s over each (a slow client downstream), longer
    than the 0.1 s gap limit: what arrived meanwhile is there when it asks, so no gap."""

    async def quick(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await pieces(reader, writer, 5, 0.02)

    async with raw_server(quick) as url:
        resp = await upstream.send(gapped(url, 0.1))
        got = b""
        async for chunk in resp.chunks():
            got += chunk
            await asyncio.sleep(0.3)
        resp.close()
    assert got == b"aaaaa"


async def test_an_engine_steady_inside_its_gap_limit_streams_to_the_end(
    upstream: UpstreamClient,
) -> None:
    async def steady(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await pieces(reader, writer, 6, 0.1)

    async with raw_server(steady) as url:
        resp = await upstream.send(gapped(url, 0.4))
        assert b"".join([chunk async for chunk in resp.chunks()]) == b"aaaaaa"  # 0.6 s in all
        resp.close()
