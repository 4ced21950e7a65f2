"""The narrow port to engines (`UpstreamClient`) and its aiohttp adapter.

The adapter owns transport details only: one ClientSession, explicit timeouts, and the mapping
of aiohttp's exceptions to attempt outcomes. Which attempt to make, and whether to retry, is
decided elsewhere (proxy.py with retry.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Mapping
from contextlib import aclosing
from dataclasses import dataclass
from typing import Literal, Protocol, TypeVar

import aiohttp

from data_plane.domain import per_request
from data_plane.outcome import ConnectFailed, Outcome, ResponseTooLarge, StreamBroken, Timeout

T = TypeVar("T")
Method = Literal["POST", "GET"]


@per_request
class UpstreamRequest:
    """One attempt: POST `body` to `url` (an engine URL plus the OpenAI path; `method` GET
    for reads such as the engine's /metrics, `body` then empty).

    `limit_s`: the attempt's own limit (docs/reliability.md), seconds from `send` until the
    answer: its head and whole body when `read`, its first chunk when streamed by `chunks`.
    Past it the client raises `LimitReachedError`; None = no limit of its own. A transport
    deadline, so a client with a timer per connection needs no timer per attempt.

    `gap_s`: the engine's gap limit, seconds without a body piece after the body's first
    piece (streamed or `read` whole), timed only while the caller waits for the next
    piece (a caller busy writing to a slow client is not the engine's silence). Past it the
    client raises AttemptError(Timeout("gap")); None = only the session's read timeout."""

    url: str
    body: bytes
    headers: Mapping[str, str]
    limit_s: float | None = None
    method: Method = "POST"
    gap_s: float | None = None


class LimitReachedError(Exception):
    """The attempt's own limit (`UpstreamRequest.limit_s`) passed before its answer."""


def limit_until(limit_s: float | None) -> float | None:
    """The loop time at which a limit of `limit_s` from now passes (None: never)."""
    return None if limit_s is None else asyncio.get_running_loop().time() + limit_s


async def within(until: float | None, step: Awaitable[T]) -> T:
    """`step` by loop time `until` (LimitReachedError after it): for adapters without a timer of
    their own."""
    if until is None:
        return await step
    timer = asyncio.timeout_at(until)
    try:
        async with timer:
            return await step
    except TimeoutError as err:
        if timer.expired():
            raise LimitReachedError() from err
        raise


class AttemptError(Exception):
    """An attempt failed in transport; `outcome` (retry.py) says how. Never carries a URL."""

    def __init__(self, outcome: Outcome, detail: str = "") -> None:
        super().__init__(f"{outcome.label}: {detail}" if detail else outcome.label)
        self.outcome = outcome


def gap_error() -> AttemptError:
    """No body piece within the engine's gap limit (`UpstreamRequest.gap_s`)."""
    return AttemptError(Timeout("gap"), "no bytes within the engine's gap limit")


class UpstreamResponse(Protocol):
    """A response whose headers have arrived; the body is read or streamed, then closed."""

    @property
    def status(self) -> int: ...

    @property
    def content_type(self) -> str: ...

    async def read(self) -> bytes:
        """The whole body; raises AttemptError(StreamBroken | Timeout("read"))."""
        ...

    def chunks(self) -> AsyncGenerator[bytes, None]:
        """Body chunks as they arrive; raises AttemptError like `read`."""
        ...

    def close(self) -> None:
        """Idempotent. Aborts the connection unless the body was fully read (cancels vLLM)."""
        ...


class LimitedResponse:
    """An `UpstreamResponse` whose `read`, or first chunk, must come by loop time `until`."""

    __slots__ = ("_resp", "_until")

    def __init__(self, resp: UpstreamResponse, until: float) -> None:
        self._resp, self._until = resp, until

    @property
    def status(self) -> int:
        return self._resp.status

    @property
    def content_type(self) -> str:
        return self._resp.content_type

    async def read(self) -> bytes:
        return await within(self._until, self._resp.read())

    async def chunks(self) -> AsyncGenerator[bytes, None]:
        async with aclosing(self._resp.chunks()) as chunks:
            first = await within(self._until, anext(chunks, None))
            if first is None:
                return
            yield first
            async for chunk in chunks:
                yield chunk

    def close(self) -> None:
        self._resp.close()


class UpstreamClient(Protocol):
    async def send(self, request: UpstreamRequest) -> UpstreamResponse:
        """Send and wait for the response headers.

        Raises AttemptError(ConnectFailed | Timeout("connect") | Timeout("first_byte")).
        """
        ...


# --- aiohttp adapter ------------------------------------------------------------------------


def _body_failure(err: BaseException) -> AttemptError:
    if isinstance(err, aiohttp.SocketTimeoutError | TimeoutError):
        return AttemptError(Timeout("read"), type(err).__name__)
    return AttemptError(StreamBroken(), type(err).__name__)


class _AiohttpResponse:
    __slots__ = ("_done", "_gap_s", "_max_body_bytes", "_resp")

    def __init__(
        self, resp: aiohttp.ClientResponse, max_body_bytes: int, gap_s: float | None = None
    ) -> None:
        self._resp = resp
        self._done = False
        self._max_body_bytes = max_body_bytes
        self._gap_s = gap_s  # `UpstreamRequest.gap_s`

    async def _piece(self, gapped: bool) -> bytes:
        """The next piece of the body (b"" at its end), within the gap limit when `gapped`."""
        piece = self._resp.content.readany()
        if not gapped or self._gap_s is None:
            return await piece
        try:
            return await within(limit_until(self._gap_s), piece)
        except LimitReachedError as err:
            raise gap_error() from err

    @property
    def status(self) -> int:
        return self._resp.status

    @property
    def content_type(self) -> str:
        return self._resp.content_type

    async def read(self) -> bytes:
        cap = self._max_body_bytes
        pieces: list[bytes] = []
        size = 0
        gapped = False  # the first piece: an engine may send its head before it works
        try:
            while piece := await self._piece(gapped):
                gapped = True
                size += len(piece)
                if size > cap:
                    too_large = ResponseTooLarge("body", cap)
                    raise AttemptError(too_large, "response body too large")
                pieces.append(piece)
        except (aiohttp.ClientError, TimeoutError) as err:
            raise _body_failure(err) from err
        self._done = True
        return b"".join(pieces)

    async def chunks(self) -> AsyncGenerator[bytes, None]:
        """The first chunk within the attempt's limit (`LimitedResponse`), later ones each
        within the gap limit of being asked for."""
        try:
            chunk = await self._piece(gapped=False)
            while chunk:
                yield chunk
                chunk = await self._piece(gapped=True)
        except (aiohttp.ClientError, TimeoutError) as err:
            raise _body_failure(err) from err
        self._done = True

    def close(self) -> None:
        if self._done:
            self._resp.release()
        else:
            self._resp.close()


@dataclass(frozen=True, slots=True)
class SessionLimits:
    connector_limit: int
    connector_limit_per_host: int
    connect_timeout_s: float
    read_timeout_s: float
    total_timeout_s: float
    # A non-streamed body (`read`) past this many bytes ends the attempt with
    # ResponseTooLarge("body"); streamed bodies are relayed piece by piece instead.
    max_body_bytes: int = 64 * 1024 * 1024


class AiohttpUpstream:
    """UpstreamClient over one aiohttp ClientSession, opened and closed by the app's
    cleanup_ctx (a session must be created inside the running loop)."""

    def __init__(self, limits: SessionLimits) -> None:
        self._limits = limits
        self._session: aiohttp.ClientSession | None = None

    def open(self) -> None:
        limits = self._limits
        connector = aiohttp.TCPConnector(
            limit=limits.connector_limit,
            limit_per_host=limits.connector_limit_per_host,
            enable_cleanup_closed=True,
        )
        timeout = aiohttp.ClientTimeout(
            total=limits.total_timeout_s,
            sock_connect=limits.connect_timeout_s,
            sock_read=limits.read_timeout_s,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=timeout,
            auto_decompress=False,
            raise_for_status=False,
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def send(self, request: UpstreamRequest) -> UpstreamResponse:
        if self._session is None:
            raise RuntimeError("AiohttpUpstream.send before open()")
        until = limit_until(request.limit_s)
        try:
            resp = await within(
                until,
                self._session.request(
                    request.method,
                    request.url,
                    data=request.body,
                    headers=request.headers,
                    allow_redirects=False,
                ),
            )
        except aiohttp.ConnectionTimeoutError as err:
            raise AttemptError(Timeout("connect"), type(err).__name__) from err
        except (aiohttp.SocketTimeoutError, TimeoutError) as err:
            # No header within sock_read: nothing reached the client, so it may be retried.
            raise AttemptError(Timeout("first_byte"), type(err).__name__) from err
        except aiohttp.ClientError as err:
            # Refused, reset, or closed before any response: nothing reached the client yet.
            raise AttemptError(ConnectFailed(), type(err).__name__) from err
        answer = _AiohttpResponse(resp, self._limits.max_body_bytes, request.gap_s)
        return answer if until is None else LimitedResponse(answer, until)
