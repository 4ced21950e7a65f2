"""The narrow port to engines (`UpstreamClient`) and its aiohttp adapter.

The adapter owns transport details only: one ClientSession, explicit timeouts, and the mapping
of aiohttp's exceptions to attempt outcomes. Which attempt to make, and whether to retry, is
decided elsewhere (proxy.py with retry.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Protocol

import aiohttp

from data_plane.metrics import AttemptOutcome


@dataclass(frozen=True, slots=True)
class UpstreamRequest:
    """One attempt: POST `body` to `url` (an engine URL plus the OpenAI path)."""

    url: str
    body: bytes
    headers: Mapping[str, str]


class AttemptError(Exception):
    """An attempt failed in transport; `outcome` says how (never a URL in the message)."""

    def __init__(self, outcome: AttemptOutcome, detail: str = "") -> None:
        super().__init__(f"{outcome}: {detail}" if detail else str(outcome))
        self.outcome = outcome


class UpstreamResponse(Protocol):
    """A response whose headers have arrived; the body is read or streamed, then closed."""

    @property
    def status(self) -> int: ...

    @property
    def content_type(self) -> str: ...

    async def read(self) -> bytes:
        """The whole body; raises AttemptError(STREAM_BROKEN | TIMEOUT_READ)."""
        ...

    def chunks(self) -> AsyncIterator[bytes]:
        """Body chunks as they arrive; raises AttemptError like `read`."""
        ...

    def close(self) -> None:
        """Idempotent. Aborts the connection unless the body was fully read (cancels vLLM)."""
        ...


class UpstreamClient(Protocol):
    async def send(self, request: UpstreamRequest) -> UpstreamResponse:
        """Send and wait for the response headers.

        Raises AttemptError(CONNECT_FAILED | TIMEOUT_CONNECT | TIMEOUT_READ).
        """
        ...


# --- aiohttp adapter ------------------------------------------------------------------------


def _body_failure(err: BaseException) -> AttemptError:
    if isinstance(err, aiohttp.SocketTimeoutError | TimeoutError):
        return AttemptError(AttemptOutcome.TIMEOUT_READ, type(err).__name__)
    return AttemptError(AttemptOutcome.STREAM_BROKEN, type(err).__name__)


class _AiohttpResponse:
    __slots__ = ("_done", "_resp")

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self._resp = resp
        self._done = False

    @property
    def status(self) -> int:
        return self._resp.status

    @property
    def content_type(self) -> str:
        return self._resp.content_type

    async def read(self) -> bytes:
        try:
            body = await self._resp.read()
        except (aiohttp.ClientError, TimeoutError) as err:
            raise _body_failure(err) from err
        self._done = True
        return body

    async def chunks(self) -> AsyncIterator[bytes]:
        content = self._resp.content
        try:
            async for chunk in content.iter_any():
                yield chunk
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


class AiohttpUpstream:
    """UpstreamClient over one aiohttp ClientSession (created and closed by the app)."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self._session = session

    @staticmethod
    def create_session(limits: SessionLimits) -> aiohttp.ClientSession:
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
        return aiohttp.ClientSession(
            connector=connector,
            timeout=timeout,
            auto_decompress=False,
            skip_auto_headers=("User-Agent",),
            raise_for_status=False,
        )

    async def send(self, request: UpstreamRequest) -> UpstreamResponse:
        try:
            resp = await self._session.post(
                request.url, data=request.body, headers=request.headers, allow_redirects=False
            )
        except aiohttp.ConnectionTimeoutError as err:
            raise AttemptError(AttemptOutcome.TIMEOUT_CONNECT, type(err).__name__) from err
        except (aiohttp.SocketTimeoutError, TimeoutError) as err:
            raise AttemptError(AttemptOutcome.TIMEOUT_READ, type(err).__name__) from err
        except aiohttp.ClientError as err:
            # Refused, reset, or closed before any response: nothing reached the client yet.
            raise AttemptError(AttemptOutcome.CONNECT_FAILED, type(err).__name__) from err
        return _AiohttpResponse(resp)
