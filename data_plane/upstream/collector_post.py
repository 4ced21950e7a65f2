"""The OTLP exporter's transport (`telemetry.otlp_http.Transport`) over the lean HTTP/1.1
client the data plane uses for engines: a pool of its own, https through its aiohttp
fallback, opened on first use on the running loop. It costs less CPU per request than aiohttp's
client (the upstream-client A/B row of `make bench`), and every microsecond of a post is
taken from the requests being served (docs/data_plane.md, "Observability")."""

from __future__ import annotations

from collections.abc import Mapping

from data_plane.telemetry.otlp_http import PostFailedError
from data_plane.upstream.http1 import Http1Upstream
from data_plane.upstream.port import (
    AiohttpUpstream,
    AttemptError,
    LimitReachedError,
    SessionLimits,
    UpstreamRequest,
)

# One export at a time (the pipeline posts batches one after another): a small pool.
_LIMITS = SessionLimits(
    connector_limit=4,
    connector_limit_per_host=0,
    connect_timeout_s=10.0,
    read_timeout_s=60.0,
    total_timeout_s=60.0,
)


class CollectorPost:
    """`Transport` for `OtlpSender`: POST, read the answer, give the connection back."""

    def __init__(self) -> None:
        self._client: Http1Upstream | None = None

    async def post(
        self, url: str, body: bytes, headers: Mapping[str, str], timeout_s: float
    ) -> int:
        client = self._client
        if client is None:
            client = self._client = Http1Upstream(_LIMITS, AiohttpUpstream(_LIMITS))
            client.open()
        try:
            resp = await client.send(UpstreamRequest(url, body, headers, timeout_s))
            try:
                await resp.read()
            finally:
                resp.close()
        except (AttemptError, LimitReachedError, OSError) as err:
            raise PostFailedError(type(err).__name__, retryable=True) from err
        except ValueError as err:  # a URL the client cannot use
            raise PostFailedError(type(err).__name__, retryable=False) from err
        return resp.status

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
