"""Posting encoded spans to an OTLP/HTTP collector: the transport half of the OTLP exporter.

What the OpenTelemetry exporter's OTEL_EXPORTER_OTLP_* settings configure, taken from
settings (docs/data_plane.md, "Observability"): the URL, extra headers, a timeout per export and
gzip compression. Like the SDK exporter it retries a batch the collector could not take for
now (429, 502, 503, 504, or no connection) with a growing pause, within the timeout, and
gives up on other answers. Non-blocking, on the event loop, through a `Transport`: the data
plane's lean HTTP/1.1 client, which costs less CPU per request than aiohttp's (the
upstream-client A/B row of `make bench`); every microsecond a post takes is taken from the
requests being served. A worker thread running
Python HTTP code would compete for the GIL with the requests being served; gzip alone runs
in one (zlib lets go of the GIL). Proxy variables of the environment are not used: spans go
straight to the collector.
"""

from __future__ import annotations

import asyncio
import gzip
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

import aiohttp

logger = logging.getLogger(__name__)

RETRYABLE = frozenset({429, 502, 503, 504})
FIRST_PAUSE_S = 0.5


@dataclass(frozen=True, slots=True)
class OtlpTarget:
    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = 10.0
    gzip: bool = False


class PostFailedError(Exception):
    """A post that got no answer: `retryable` unless no retry can help (a bad URL)."""

    def __init__(self, why: str, retryable: bool) -> None:
        super().__init__(why)
        self.why, self.retryable = why, retryable


class Transport(Protocol):
    """How a batch reaches the collector: one POST, its answer's status (PostFailedError when
    there is none). The data plane passes its lean HTTP/1.1 client (`upstream/collector_post`);
    `AiohttpTransport` otherwise."""

    async def post(
        self, url: str, body: bytes, headers: Mapping[str, str], timeout_s: float
    ) -> int: ...

    async def close(self) -> None: ...


class AiohttpTransport:
    """`Transport` over one aiohttp ClientSession, opened on first use on the running loop."""

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None

    async def post(
        self, url: str, body: bytes, headers: Mapping[str, str], timeout_s: float
    ) -> int:
        if self._session is None:
            self._session = aiohttp.ClientSession(trust_env=False)
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        try:
            async with self._session.post(url, data=body, headers=headers, timeout=timeout) as resp:
                await resp.read()
                return resp.status
        except ValueError as err:  # a bad URL (aiohttp.InvalidURL): no retry helps
            raise PostFailedError(type(err).__name__, retryable=False) from err
        except (aiohttp.ClientError, OSError, TimeoutError) as err:  # refused, reset, timed out
            raise PostFailedError(type(err).__name__, retryable=True) from err

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


class OtlpSender:
    """POSTs ExportTraceServiceRequest bytes to one collector."""

    def __init__(self, target: OtlpTarget, transport: Transport | None = None) -> None:
        self.target = target
        headers = {**target.headers, "Content-Type": "application/x-protobuf"}
        if target.gzip:
            headers["Content-Encoding"] = "gzip"
        self._headers = headers
        self._transport = transport or AiohttpTransport()
        self._closed = False

    async def send(self, data: bytes) -> bool:
        """True when the collector took the batch; False (logged) when it did not."""
        if self._closed:
            return False
        body = await asyncio.to_thread(gzip.compress, data) if self.target.gzip else data
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.target.timeout_s
        pause = FIRST_PAUSE_S
        while True:
            outcome = await self._post(body, max(deadline - loop.time(), 0.001))
            if outcome is None:
                return True
            if not outcome[0] or loop.time() + pause >= deadline:
                logger.warning("span export failed: %s", outcome[1])
                return False
            await asyncio.sleep(pause)
            pause *= 2

    async def _post(self, body: bytes, timeout_s: float) -> tuple[bool, str] | None:
        """None when accepted, else (worth retrying, why)."""
        try:
            status = await self._transport.post(self.target.url, body, self._headers, timeout_s)
        except PostFailedError as err:
            return err.retryable, err.why
        if 200 <= status < 300:
            return None
        return status in RETRYABLE, f"collector answered {status}"

    async def close(self) -> None:
        self._closed = True
        await self._transport.close()
