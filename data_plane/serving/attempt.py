"""One upstream attempt: send, classify the answer, and relay a stream to the client.

Before the first byte reaches the client every failure comes back as `Failed` (the proxy may
retry it); after it, a broken stream ends with ONE SSE error event and comes back as `Served`
with its outcome. Client disconnects and deadline cancellations propagate, after the upstream
response is closed (which aborts the engine's work).

The runner takes `(request, attempt)`: the `lifecycle.Request` says how to send it (its path,
its body per served model, its headers, whether it streams, where its answer goes) and notes
what its attempts met; the `Attempt`, where this try goes and within what limits.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, Protocol

from opentelemetry.trace import SpanKind

from data_plane.domain import Candidate, CompiledEndpoint, per_request
from data_plane.engine_keys import EngineKeys
from data_plane.outcome import BudgetMissed, Cancelled, Outcome, Timeout, UpstreamStatus
from data_plane.progress.pace import EnginePace, engine_time_s, engine_tpot_s, output_cap
from data_plane.progress.stall import StallWatch
from data_plane.progress.stall_guard import StallGuard, Wait
from data_plane.resilience.health import Health
from data_plane.serving.lifecycle import Request
from data_plane.serving.usage import SSE_TAIL_BYTES, Usage, read_usage
from data_plane.settings import ProgressConfig
from data_plane.telemetry.metrics import DataPlaneMetrics
from data_plane.telemetry.tracing import (
    ATTR_ATTEMPT,
    ATTR_ENDPOINT,
    ATTR_OUTCOME,
    ATTR_PAIR,
    NO_SPAN,
    AnySpan,
    Tracing,
)
from data_plane.upstream.port import (
    AttemptError,
    LimitReachedError,
    UpstreamClient,
    UpstreamRequest,
    UpstreamResponse,
)

SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
MAX_ERROR_BODY_BYTES = 64 * 1024


class ClientGoneError(ConnectionError):
    """The client went away while we were writing to it."""


class ClientSink(Protocol):
    """Where the answer goes (an aiohttp response in production, a recorder in tests)."""

    @property
    def started(self) -> bool:
        """True once a status line went out (no retry, no status change after that)."""
        ...

    async def send(self, status: int, headers: Mapping[str, str], body: bytes) -> None: ...

    async def start(self, status: int, headers: Mapping[str, str]) -> None: ...

    async def write(self, chunk: bytes) -> None:
        """Raises ClientGoneError when the client disconnected."""
        ...

    async def finish(self) -> None: ...


@per_request
class Served:
    """The client got (or will get) this attempt's answer; `outcome` None = clean."""

    status: int
    body: bytes  # whole body (non-streaming) or the stream's tail (for usage)
    content_type: str
    streamed: bool
    first_byte_s: float | None  # monotonic time the first byte went to the client (streams)
    outcome: Outcome | None = None
    usage: Usage | None = None  # a non-streamed answer's `usage`, read once (None: none found)
    # The non-streamed body as decoded when reading its usage decoded it whole (None: it was
    # not): what the quality guard judges.
    doc: dict[str, Any] | None = field(default=None, hash=False, compare=False)


@per_request
class Failed:
    """Nothing reached the client; the proxy decides whether to try elsewhere."""

    outcome: Outcome
    status: int | None = None
    body: bytes = b""


@per_request
class AttemptLimit:
    """What may end one attempt before its first byte (streams) or its whole answer
    (non-streams), and on whose account.

    `limit_s`: the client's limit on it (its TTFT budget for streams, the time left for a
    re-ask), kept by the upstream client as a transport deadline; a miss is `BudgetMissed`
    (next candidate, no blame); None = none (the request deadline still applies, and a request
    deadline is never an engine fault). `allowance_s`: the engine's own pace for the work at
    `load` (`progress.pace`); when an overdue attempt ends as lack of progress is the
    package's model (`data_plane.progress`): `movable` says the request has somewhere else
    to go (a next candidate fits in the client's deadline, `Proxy._handover_limit`). None =
    not watched. `load` = requests at the endpoint when the attempt started, this one
    included (what its pace is measured at). `gap_s`: the engine's gap limit, how long it may
    go silent after a stream's first byte or after a non-streamed body's first bytes
    (`UpstreamRequest.gap_s`; a miss is `Timeout("gap")`, an engine fault); None = the read
    timeout only. `first_token_s`: the engine's own pace for its first token (`allowance_s`
    for streams, the prefill's share of it for non-streams): how long it may work on the
    attempt without moving a token counter (`progress.stillness`); None = `allowance_s`.
    `background`: the router's own item (a canary item), never a client's: it counts in no
    load at the endpoint (no client's allowance or decision is priced with it), no stall rule
    watches it (its `limit_s` ends it, no blame), and it feeds no breaker and no pace, so it
    never changes when a hung engine is given up on; an answer to it still counts as the
    endpoint's progress (the engine works)."""

    limit_s: float | None = None
    allowance_s: float | None = None
    load: float = 1.0
    gap_s: float | None = None
    movable: bool = False
    first_token_s: float | None = None
    background: bool = False

    def missed(self) -> AttemptError:
        return AttemptError(BudgetMissed(), "no first byte within the client's limit")


NO_LIMIT = AttemptLimit()


@dataclass(slots=True)
class Attempt:
    """One try of a request (`lifecycle.Request`, which says how to send it) at one endpoint:
    the candidate and endpoint it goes to, its number (the walk's count, `Request.attempts`)
    and its limits; while it runs, the runner sets its client span and its stall
    registration (`wait`; None: not watched)."""

    cand: Candidate
    endpoint: CompiledEndpoint
    number: int
    limit: AttemptLimit = NO_LIMIT
    span: AnySpan = NO_SPAN
    wait: Wait | None = None


def stream_error_event(message: str, code: str) -> bytes:
    """The one SSE event a stream that broke after its first byte ends with."""
    error = {"message": message, "type": "server_error", "param": None, "code": code}
    return b"data: " + json.dumps({"error": error}).encode() + b"\n\n"


def _status_outcome(status: int) -> Outcome | None:
    return None if 200 <= status < 300 else UpstreamStatus(status)


class AttemptRunner:
    """Runs attempts with one upstream client, recording health, metrics and a client span."""

    def __init__(
        self,
        upstream: UpstreamClient,
        health: Health,
        metrics: DataPlaneMetrics,
        tracing: Tracing,
        clock: Callable[[], float] = time.monotonic,
        engine_keys: EngineKeys | None = None,
        pace: EnginePace | None = None,
        stall: StallGuard | None = None,
    ) -> None:
        self._upstream = upstream
        self._health = health
        self._metrics = metrics
        self._tracing = tracing
        self._clock = clock
        self._engine_keys = engine_keys
        self.pace = pace or EnginePace(ProgressConfig())
        config = self.pace.config
        self.stall = stall or StallGuard(StallWatch(config.stall_window_s, config.open_windows))
        self.stall.on_stall = health.stalled
        self.stall.on_hang = health.hung

    def engine_limit(
        self, request: Request, cand: Candidate, endpoint: CompiledEndpoint
    ) -> AttemptLimit:
        """The engine's own terms for an attempt at `endpoint` now: its allowance, its profiled
        time for the first byte (streams) or for the longest answer the request allows
        (non-streams: `max_tokens`, else the context left), at its load now, x its observed
        slowdown x the margin (`progress.pace`); and its gap limit, from its profiled time
        per token at that load, the same slowdown and margin, at least the floor. Never our
        prediction for this request, and no client limit (the proxy adds that)."""
        load = self._health.tracker.load.get(endpoint.id, 0.0) + 1.0
        pair = cand.pair
        output = 0 if request.stream else output_cap(pair, cand.input_tokens, request.max_tokens)
        profile_s = engine_time_s(pair, cand.input_tokens, output, load)
        gap_s = self.pace.gap_s(endpoint.id, engine_tpot_s(pair, load))
        allowance_s = self.pace.allowance_s(endpoint.id, profile_s)
        first_token_s = allowance_s
        if not request.stream:  # its prefill's share, what may move no engine counter
            prefill_s = engine_time_s(pair, cand.input_tokens, 0, load)
            first_token_s = self.pace.allowance_s(endpoint.id, prefill_s)
        return AttemptLimit(None, allowance_s, load=load, gap_s=gap_s, first_token_s=first_token_s)

    def _observe_pace(
        self, cand: Candidate, endpoint_id: str, limit: AttemptLimit, result: Served, took_s: float
    ) -> None:
        """A clean answer says how fast the engine works now: its first byte (streams) or the
        whole answer for the tokens its `usage` reports (non-streams), against the profile."""
        pair = cand.pair
        if result.streamed:
            profile_s = engine_time_s(pair, cand.input_tokens, 0, limit.load)
        elif result.usage is not None:
            usage = result.usage
            profile_s = engine_time_s(pair, usage.input_tokens, usage.output_tokens, limit.load)
        else:
            return
        self.pace.observe(endpoint_id, took_s, profile_s)

    async def run(self, request: Request, attempt: Attempt) -> Served | Failed:
        limit, endpoint, cand = attempt.limit, attempt.endpoint, attempt.cand
        if limit.background:
            return await self._background(request, attempt)
        started = self._clock()
        outcome: Outcome | None = Cancelled()
        self._health.acquire(endpoint.id)
        in_flight = self._health.tracker.load
        load_met = in_flight.get(endpoint.id, 0.0)
        allowance_s = limit.allowance_s
        wait = None
        if allowance_s is not None:
            wait = self.stall.waiting(endpoint.id, allowance_s, limit.movable, limit.first_token_s)
        attempt.wait = wait
        with self._tracing.span(
            "gearbox.upstream",
            SpanKind.CLIENT,
            {ATTR_PAIR: cand.pair.pair, ATTR_ENDPOINT: endpoint.id, ATTR_ATTEMPT: attempt.number},
        ) as span:
            try:
                attempt.span = span
                result = await self._stallable(request, attempt)
                outcome = result.outcome
                if isinstance(result, Served) and outcome is None:
                    done_s = result.first_byte_s
                    done_s = self._clock() if done_s is None else done_s
                    self._observe_pace(cand, endpoint.id, limit, result, done_s - started)
            except AttemptError as err:
                outcome = err.outcome
                result = Failed(err.outcome)
            finally:
                self.stall.done(wait)
                # a stall was counted once for the endpoint, not once per attempt it ended
                counted = wait is None or not wait.stalled
                request.load_met = max(load_met, in_flight.get(endpoint.id, 0.0))
                self._health.release(endpoint.id, outcome, counted)
                label = "ok" if outcome is None else outcome.label
                span.set_attribute(ATTR_OUTCOME, label)
                self._metrics.observe_attempt(endpoint.id, label, self._clock() - started)
        return result

    async def _background(self, request: Request, attempt: Attempt) -> Served | Failed:
        """A `background` attempt (`AttemptLimit`): no load, no stall watch, no breaker, no
        pace; an answer from the engine, whatever its status, is the endpoint's progress."""
        started = self._clock()
        outcome: Outcome | None = Cancelled()
        endpoint = attempt.endpoint
        with self._tracing.span(
            "gearbox.upstream",
            SpanKind.CLIENT,
            {ATTR_PAIR: attempt.cand.pair.pair, ATTR_ENDPOINT: endpoint.id, ATTR_ATTEMPT: 1},
        ) as span:
            try:
                attempt.span = span
                result = await self._limited(request, attempt)
                outcome = result.outcome
            except AttemptError as err:
                outcome = err.outcome
                result = Failed(err.outcome)
            finally:
                label = "ok" if outcome is None else outcome.label
                span.set_attribute(ATTR_OUTCOME, label)
                self._metrics.observe_attempt(endpoint.id, label, self._clock() - started)
        if isinstance(result, Served) or result.status is not None:
            self.stall.progress(endpoint.id)
        return result

    async def _stallable(self, request: Request, attempt: Attempt) -> Served | Failed:
        """`_limited`, ended as lack of progress when its endpoint stalls: the guard cancels
        the task while it waits (`progress.stall_guard`); that cancellation, and only that one,
        becomes `Timeout("first_byte")` (the request deadline's or a client's disconnect,
        arriving as well, goes on as a cancellation)."""
        wait = attempt.wait
        try:
            return await self._limited(request, attempt)
        except asyncio.CancelledError:
            if wait is None or not wait.stalled:
                raise
            task = asyncio.current_task()
            if task is not None and task.uncancel() > 0:
                raise
            stalled = "no progress on any attempt at this endpoint for its stall window"
            raise AttemptError(Timeout("first_byte"), stalled) from None

    async def _limited(self, request: Request, attempt: Attempt) -> Served | Failed:
        """`_exchange` under the attempt's own limit, which the upstream client keeps (a
        transport deadline: the http1 client moves its connection's one timer, so no timer
        is armed per attempt); its expiry becomes the limit's outcome."""
        try:
            return await self._exchange(request, attempt)
        except LimitReachedError as err:
            raise attempt.limit.missed() from err

    async def _exchange(self, request: Request, attempt: Attempt) -> Served | Failed:
        cand, endpoint, limit = attempt.cand, attempt.endpoint, attempt.limit
        headers = {
            "Content-Type": "application/json",
            "Accept": "text/event-stream" if request.stream else "application/json",
            "X-Request-Id": request.id,
        }
        self._tracing.inject(headers, attempt.span, request.trace_headers)
        if self._engine_keys is not None:  # the engine's key; never the client's
            auth = self._engine_keys.authorization(endpoint.id, cand.pair.pair)
            if auth is not None:
                headers["Authorization"] = auth
        body = request.bodies(cand.pair.served_model_name)
        url = endpoint.url + request.path
        sent = UpstreamRequest(url, body, headers, limit.limit_s, gap_s=limit.gap_s)
        resp = await self._upstream.send(sent)
        try:
            if request.stream and resp.status == 200:
                return await self._relay(request, attempt, resp)
            data = await resp.read()
            self.stall.arrived(
                attempt.wait
            )  # a whole answer, whatever its status: the engine works
        finally:
            resp.close()
        outcome = _status_outcome(resp.status)
        if outcome is not None:
            return Failed(outcome, resp.status, data[:MAX_ERROR_BODY_BYTES])
        usage, doc = read_usage(data)
        return Served(resp.status, data, resp.content_type, False, None, usage=usage, doc=doc)

    async def _relay(
        self, request: Request, attempt: Attempt, resp: UpstreamResponse
    ) -> Served | Failed:
        """Stream `resp` to the client chunk by chunk, no buffering beyond the first chunk
        (the client's limit covers the first chunk only; the gap limit each later wait for
        the engine, never the time `sink.write` spends on a slow client). Every chunk is the
        endpoint's progress (`progress.stall_guard`)."""
        cand, endpoint_id, wait = attempt.cand, attempt.endpoint.id, attempt.wait
        stall, sink = self.stall, request.sink
        async with aclosing(resp.chunks()) as chunks:
            first = await anext(chunks, b"")
            if not first:
                raise AttemptError(Timeout("first_byte"), "stream ended before its first byte")
            stall.arrived(wait)
            await sink.start(200, {**SSE_HEADERS, **request.headers_for(cand, attempt.number)})
            request.streaming_pair = cand.pair.pair
            first_byte_s = self._clock()
            await sink.write(first)
            tail = first[-SSE_TAIL_BYTES:]
            try:
                async for chunk in chunks:
                    stall.progress(endpoint_id)
                    await sink.write(chunk)
                    tail = (tail + chunk)[-SSE_TAIL_BYTES:]
            except AttemptError as err:
                self._metrics.pair(cand.pair.pair).stream_errors.inc()
                silent = isinstance(err.outcome, Timeout)  # the gap limit (or read timeout)
                what = "went silent" if silent else "stream broke"
                message = f"the engine {what}; the answer is incomplete"
                await sink.write(stream_error_event(message, "stream_broken"))
                await sink.finish()
                return Served(200, tail, "text/event-stream", True, first_byte_s, err.outcome)
        await sink.finish()
        return Served(200, tail, "text/event-stream", True, first_byte_s)
