"""Stop profiling an engine that has died: a run of failures that only a dead engine gives.

An engine that dies mid-profile (its process gone, or vLLM's engine core crashed behind a live
API server) fails every request after that: refused connections, or HTTP 5xx. Without a stop,
the profiler would send every eval item and load request left to it (625 doomed requests in
issue 35's run). `DeadEngineGuard` wraps the completion client and raises `EngineGoneError`
after `limit` such failures in a row, with no success in between; 4xx answers (a bad item)
and timeouts of a slow engine do not count.
"""

from __future__ import annotations

from profiler.engine.client import RequestFailedError
from profiler.errors import EndpointError
from profiler.evals.accuracy import EvalItem
from profiler.load.runner import CompletionClient
from profiler.stats import TimedStream

# Requests in a row that failed as only a dead engine fails, before the pair is given up.
# Above the eval concurrency (8): the requests in flight when an engine dies all fail at once.
DEAD_ENGINE_FAILURES = 12
_DEAD_PREFIXES = (
    "ClientConnectorError",
    "ServerDisconnectedError",
    "ClientOSError",
    "ClientPayloadError",
    "HTTP 5",
)


class EngineGoneError(EndpointError):
    """The engine stopped answering in the middle of a profile; the message says how."""


def is_dead_engine_failure(reason: str) -> bool:
    """A refused or dropped connection, or a 5xx answer: what a dead engine sends back."""
    return reason.startswith(_DEAD_PREFIXES)


class DeadEngineGuard:
    """A `CompletionClient` that passes requests on and gives up after `limit` dead-engine
    failures in a row (any success, 4xx or timeout resets the count)."""

    def __init__(self, inner: CompletionClient, url: str, limit: int = DEAD_ENGINE_FAILURES):
        self._inner = inner
        self._url = url
        self._limit = limit
        self._in_a_row = 0
        self.gone: EngineGoneError | None = None

    async def stream_completion(self, prompt: str, max_tokens: int) -> TimedStream:
        self._check()
        try:
            stream = await self._inner.stream_completion(prompt, max_tokens)
        except RequestFailedError as err:
            self._failed(err.reason)
            raise
        self._in_a_row = 0
        return stream

    async def complete(self, item: EvalItem) -> str:
        self._check()
        try:
            answer = await self._inner.complete(item)
        except RequestFailedError as err:
            self._failed(err.reason)
            raise
        self._in_a_row = 0
        return answer

    def _check(self) -> None:
        if self.gone is not None:
            raise self.gone

    def _failed(self, reason: str) -> None:
        if not is_dead_engine_failure(reason):
            self._in_a_row = 0
            return
        self._in_a_row += 1
        if self._in_a_row >= self._limit and self.gone is None:
            self.gone = EngineGoneError(
                f"{self._url}: the engine stopped answering ({self._in_a_row} requests in a "
                f"row failed; last: {reason}); profiling of this pair stopped"
            )
            raise self.gone


def engine_gone_in(group: BaseExceptionGroup[BaseException]) -> EngineGoneError | None:
    """The EngineGoneError inside (nested) task-group errors, if any."""
    for error in group.exceptions:
        if isinstance(error, EngineGoneError):
            return error
        if isinstance(error, BaseExceptionGroup):
            found = engine_gone_in(error)
            if found is not None:
                return found
    return None
