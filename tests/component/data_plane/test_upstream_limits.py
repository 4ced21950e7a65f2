"""A hostile engine on loopback against the upstream limits (docs/data_plane.md, "Upstream
limits"): an endless header line and an oversized answer end the attempt while the bytes
arrive, with the outcome `response_too_large` and a 502 that names the limit."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from pytest_aiohttp import AiohttpClient

from data_plane.app import METRICS, create_app
from data_plane.outcome import ResponseTooLarge
from data_plane.settings import (
    DataPlaneSettings,
    RedisSettings,
    ScrapeSettings,
    TableSettings,
    UpstreamSettings,
)
from data_plane.upstream.http1 import Http1Upstream
from data_plane.upstream.http1_wire import MAX_HEAD_BYTES
from data_plane.upstream.port import (
    AiohttpUpstream,
    AttemptError,
    SessionLimits,
    UpstreamClient,
    UpstreamRequest,
)
from tests.component.data_plane.fakes import make_table, pair_entry

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
FILL = b"x" * (64 * 1024)
BODY = json.dumps({"model": "auto", "messages": [{"role": "user", "content": "hi"}]})


class Hostile:
    """A TCP engine that reads a request head, writes `opening`, then `FILL` until the client
    goes (or `total` bytes went out); counts the bytes it got onto the socket."""

    def __init__(self, opening: bytes, total: int | None = None) -> None:
        self.opening, self.total = opening, total
        self.sent = 0
        self.requests = 0

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            await reader.readuntil(b"\r\n\r\n")
            self.requests += 1
            writer.write(self.opening)
            self.sent = len(self.opening)
            while self.total is None or self.sent < self.total:
                writer.write(FILL)
                await writer.drain()
                self.sent += len(FILL)
            await reader.read()  # the client reads on, or goes


@contextlib.asynccontextmanager
async def engine(handle: Handler) -> AsyncIterator[str]:
    """`handle` served on 127.0.0.1; yields the base URL; cancels what still runs on exit."""
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
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        for task in list(running):
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        await server.wait_closed()


def _limits(max_body_bytes: int) -> SessionLimits:
    return SessionLimits(10, 0, 2.0, 5.0, 30.0, max_body_bytes)


async def _read(client: UpstreamClient, url: str) -> bytes:
    resp = await client.send(UpstreamRequest(url + "/v1/chat/completions", b"{}", {}))
    try:
        return await resp.read()
    finally:
        resp.close()


async def _outcome(client: UpstreamClient, url: str) -> object:
    with pytest.raises(AttemptError) as caught:
        await _read(client, url)
    return caught.value.outcome


ENDLESS_HEADER = b"HTTP/1.1 200 OK\r\nX-Junk: "


async def test_an_endless_header_line_ends_the_attempt_within_the_head_limit() -> None:
    hostile = Hostile(ENDLESS_HEADER)
    client = Http1Upstream(_limits(1024 * 1024), fallback=AiohttpUpstream(_limits(1024 * 1024)))
    async with engine(hostile) as url:
        try:
            assert await _outcome(client, url) == ResponseTooLarge("head", MAX_HEAD_BYTES)
        finally:
            await client.close()
    # What the engine got onto the socket before the client closed it: the head limit plus
    # the kernel's socket buffers, not the unbounded line it meant to send.
    assert hostile.sent < 32 * 1024 * 1024


@pytest.mark.parametrize(
    "opening",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 1073741824\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n40000000\r\n",
        b"HTTP/1.1 500 Oops\r\nConnection: close\r\n\r\n",  # an error body, to the end
    ],
    ids=["content-length", "chunked", "until-close"],
)
@pytest.mark.parametrize("kind", ["http1", "aiohttp"])
async def test_a_non_streamed_body_past_the_cap_ends_the_attempt(opening: bytes, kind: str) -> None:
    cap = 512 * 1024
    hostile = Hostile(opening)
    fallback = AiohttpUpstream(_limits(cap))
    client: Http1Upstream | AiohttpUpstream = (
        Http1Upstream(_limits(cap), fallback) if kind == "http1" else fallback
    )
    if kind == "aiohttp":
        fallback.open()
    async with engine(hostile) as url:
        try:
            assert await _outcome(client, url) == ResponseTooLarge("body", cap)
        finally:
            await client.close()
    assert hostile.sent < 32 * 1024 * 1024


async def test_a_body_within_the_cap_is_read_whole() -> None:
    body = FILL * 4
    opening = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body)
    client = Http1Upstream(_limits(len(body)), AiohttpUpstream(_limits(len(body))))
    async with engine(Hostile(opening, total=len(opening) + len(body))) as url:
        try:
            assert await _read(client, url) == body
        finally:
            await client.close()


async def _routed(
    aiohttp_client: AiohttpClient, tmp_path: Path, url: str, body_cap: int | None = None
) -> tuple[int, dict[str, str], float]:
    """One request through a real app whose only engine is at `url`: (status, error, how many
    attempts ended `response_too_large`)."""
    table = make_table([pair_entry("fam", "int4", urls=[url])])
    snapshot = tmp_path / "table.json"
    snapshot.write_text(table.model_dump_json(), encoding="utf-8")
    upstream = UpstreamSettings() if body_cap is None else UpstreamSettings(max_body_bytes=body_cap)
    settings = DataPlaneSettings(
        redis=RedisSettings(url=""),
        table=TableSettings(snapshot_path=snapshot),
        scrape=ScrapeSettings(interval_s=0.0),
        upstream=upstream,
    )
    app = create_app(settings)
    client = await aiohttp_client(app)
    resp = await client.post("/v1/chat/completions", data=BODY)
    error = (await resp.json())["error"]
    attempts = app[METRICS].registry.get_sample_value(
        "gearbox_upstream_attempts_total",
        {"endpoint": "fam@int4#0", "outcome": "response_too_large"},
    )
    return resp.status, error, attempts or 0.0


async def test_the_client_gets_a_502_naming_the_head_limit(
    aiohttp_client: AiohttpClient, tmp_path: Path
) -> None:
    async with engine(Hostile(ENDLESS_HEADER)) as url:
        status, error, attempts = await _routed(aiohttp_client, tmp_path, url)
    assert status == 502
    assert error["code"] == "upstream_error"
    assert error["message"].startswith(
        f"the engine's response head exceeded {MAX_HEAD_BYTES} bytes ("
    )
    assert attempts >= 1.0


async def test_the_client_gets_a_502_naming_the_body_cap_and_it_is_not_retried(
    aiohttp_client: AiohttpClient, tmp_path: Path
) -> None:
    cap = 256 * 1024
    hostile = Hostile(b"HTTP/1.1 200 OK\r\nContent-Length: 1073741824\r\n\r\n")
    async with engine(hostile) as url:
        status, error, attempts = await _routed(aiohttp_client, tmp_path, url, body_cap=cap)
    assert (status, error["code"]) == (502, "upstream_error")
    assert error["message"] == f"the engine's response body exceeded {cap} bytes (1 attempt(s))"
    assert (attempts, hostile.requests) == (1.0, 1)
