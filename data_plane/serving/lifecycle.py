"""One client request from its door to its end, whichever door it came through
(docs/design.md, "One request, by capability").

The door creates the `Request` (the HTTP middleware, gateway mode's ext_proc stream): its id,
its route, when it started. The decision step fills it in (it is a `decision_step.Decidable`:
the table, the request as read, the decision, the tenant, class and client, its fair-share hold
and in-flight slot, its wait in the queue), and every later step reads `request.decision`,
`request.table` ... off it. The door ends it with `Finish.finish`, the one ending both doors
share: the error-to-outcome mapping (`telemetry.request_outcome`), the request counted
(`gearbox_requests_total{outcome}` and its duration, once), and its flow-control slot and fair
share freed, with the queue told (once); and its served answer, when the door saw one, offered
to the live checks (once, after the client has it). Gateway mode counts a request when it is
answered (routed, or refused) and frees its hold when its answer ends (`gateway.in_flight`), so
it calls `count` first and `finish` at the end; the HTTP door does both at once. Gateway mode
never sees an answer (Envoy sends it; the response phase carries no body Gearbox reads), so
its `Finish` has no checks and its requests never offer one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol

from data_plane.decision_step import Decidable
from data_plane.domain import Candidate, RouteDecision
from data_plane.errors import RouterError
from data_plane.telemetry.metrics import DataPlaneMetrics, RequestOutcome, Route
from data_plane.telemetry.request_outcome import outcome_of

if TYPE_CHECKING:  # the attempt module runs a Request's attempts; the walk answers it
    from data_plane.serving.attempt import ClientSink, Failed
    from data_plane.serving.walk import Answer

Ending = RequestOutcome | RouterError


class Step(Protocol):
    """What frees a decided request's tenant share and slot (`DecisionStep.finished`)."""

    def finished(self, request: Decidable) -> None: ...


class AnswerCheck(Protocol):
    """The live checks (`data_plane.checks.accuracy_check.AccuracyChecker`), offered each
    served answer after the client has it; serving does not import the checks package, which
    sits above it (the "Data plane layers" contract)."""

    def offer(self, request: Request, answer: Answer) -> None: ...


class Queue(Protocol):
    """The door's queue, told that a request ended (`flow.queue.FlowQueue.finished`)."""

    def finished(self) -> None: ...


_LENT = ("sink", "bodies", "headers_for")  # what `Request.let_go` drops


class Request(Decidable):
    """One client request: created by its door, filled in by the decision step, walked through its
    chain by the HTTP door's proxy, ended by `Finish`. `outcome`: what it came to so far (the
    door sets it; `Finish.count` maps an error to it).

    Where its walk stands (the HTTP door; `serving/walk.py`): the proxy moves it, the attempt
    runner and delivery read and note what they see. The chain it walks is `walked` (its
    decision's, with the latency-relaxed pairs once relaxed). `attempts` is its one counter of
    engine attempts (the walk's retry policy reads it, each attempt is numbered by it, and an
    error after one says "do not retry"). The live checks' own asks are Requests too, never
    decided and never counted.

    How to send it (`sends`, before its first attempt; the attempt runner takes the request
    and one `attempt.Attempt` at a time): the OpenAI path, the body per served model, the
    answer's X-Route-* headers, the client's trace headers, where its answer goes."""

    __slots__ = (
        "answer",
        "attempts",
        "bodies",
        "counted",
        "dispatched_s",
        "ended",
        "failure",
        "headers_for",
        "id",
        "last",
        "load_met",
        "max_tokens",
        "outcome",
        "path",
        "relaxed",
        "route",
        "sink",
        "started_s",
        "stopped",
        "stream",
        "streaming_pair",
        "trace_headers",
        "ttft_budget_s",
        "wants_json",
    )

    path: str  # the OpenAI path, e.g. /v1/chat/completions
    sink: ClientSink  # where its answer goes (a stream's chunks as they come)
    bodies: Callable[[str], bytes]  # served model name -> body with `model` rewritten
    # The X-Route-* headers of an answer of a candidate, at an attempt count (a relaxed
    # fallback's say so: the proxy swaps them for its walk of the relaxed pairs).
    headers_for: Callable[[Candidate, int], dict[str, str]]
    stream: bool
    wants_json: bool
    ttft_budget_s: float | None  # the client's TTFT budget (streams); the proxy applies it
    # The client's traceparent/tracestate, passed on as they are while tracing is off.
    trace_headers: Mapping[str, str]
    # max_tokens / max_completion_tokens when the client set it; None: the answer may run
    # to the context limit (what the engine's allowance is for, `progress.pace`).
    max_tokens: int | None
    # When it was decided, on `started_s`'s clock (after its body and any wait in the
    # queue; None: at `started_s`): the engine's lateness runs from then.
    dispatched_s: float | None

    def __init__(self, request_id: str, route: Route, started_s: float) -> None:
        super().__init__()
        self.id = request_id
        self.route = route
        # On its door's one clock (`Finish.clock`): its duration, its latency and its
        # budget's attainment run from then.
        self.started_s = started_s
        self.outcome = RequestOutcome.OK
        self.counted = False  # `gearbox_requests_total` has it
        self.ended = False  # its hold and slot are free, the queue told
        self.attempts = 0
        self.failure: Failed | None = None  # the last attempt's, while no answer is in hand
        self.last: Candidate | None = None  # the candidate of the walk's last attempt
        self.stopped = False  # retry policy or retry budget said stop (no relaxed fallback)
        self.streaming_pair: str | None = None  # the pair whose stream the client is reading
        # The chain as walked once the proxy relaxed it (a best-effort request whose feasible
        # pairs all failed): the latency-relaxed decision with the decision's own candidates
        # first. None: the walk is the decision's (`walked`).
        self.relaxed: RouteDecision | None = None
        # The most requests in flight at its last attempt's endpoint, at that attempt's start
        # or end (this one included): the load its answer met, which later arrivals raise
        # above the decision's (`resilience.overshoot` predicts at it).
        self.load_met = 0.0
        # The answer the client got, once delivered whole or streamed (the HTTP door's proxy
        # sets it): what `Finish.finish` offers the live checks.
        self.answer: Answer | None = None

    @property
    def walked(self) -> RouteDecision:
        """The fallback chain its walk follows: its decision, or once relaxed the relaxed
        decision, whose candidates follow the decision's (accounted as fallbacks from the
        first choice, measured against the same budget)."""
        relaxed = self.relaxed
        return self.decision if relaxed is None else relaxed

    def sends(
        self,
        path: str,
        sink: ClientSink,
        bodies: Callable[[str], bytes],
        headers_for: Callable[[Candidate, int], dict[str, str]],
        *,
        stream: bool = False,
        wants_json: bool = False,
        ttft_budget_s: float | None = None,
        trace_headers: Mapping[str, str] | None = None,
        max_tokens: int | None = None,
        dispatched_s: float | None = None,
    ) -> None:
        """How to send it (see the class), set by its door (or the live check that asks)."""
        self.path, self.sink, self.bodies, self.headers_for = path, sink, bodies, headers_for
        self.stream, self.wants_json = stream, wants_json
        self.ttft_budget_s = ttft_budget_s
        self.trace_headers = {} if trace_headers is None else trace_headers
        self.max_tokens, self.dispatched_s = max_tokens, dispatched_s

    def let_go(self) -> None:
        """Drop what its door lent it, once it is over (`Finish.finish`): the sink holds the
        door's aiohttp request, which holds this one (`middleware.REQUEST`), so kept they
        make a cycle that leaves each request's objects (its body, aiohttp's request and
        response) to the cyclic collector instead of being freed when the door returns. With the
        overhead gate at 64 connections (alternated, same hour): 0.40-0.44 of the minimal
        proxy kept, 0.48-0.49 dropped (Gearbox 739-1,087 against 572-691 us of CPU per
        request)."""
        for name in _LENT:
            if hasattr(self, name):
                delattr(self, name)


class Finish:
    """How a door ends its requests (one per door: its metrics, its decision step and its
    queue, None where it keeps none). `clock`: the door's one clock, the app's injected one
    (`AppDeps.clock`, the gateway processor's): its requests' `started_s` are read on it when
    the door creates them, and their durations end on it."""

    __slots__ = ("_checks", "_metrics", "_queue", "_step", "clock")

    def __init__(
        self,
        metrics: DataPlaneMetrics,
        step: Step | None = None,
        queue: Queue | None = None,
        clock: Callable[[], float] = time.monotonic,
        checks: AnswerCheck | None = None,
    ) -> None:
        self._checks = checks  # offered each served answer (None: the door keeps none)
        self._metrics = metrics
        self._step = step
        self._queue = queue
        self.clock = clock

    def finish(self, request: Request, ending: Ending | None = None) -> None:
        """The request is over (answered, failed or cancelled): counted with `ending` unless
        it was counted already (None: not counted at all), its served answer offered to the
        live checks (once: before it is freed, which a served request is), then freed
        (`free`)."""
        if ending is not None:
            self.count(request, ending)
        answer = request.answer
        if answer is not None and self._checks is not None and not request.ended:
            self._checks.offer(request, answer)
        self.free(request)
        request.let_go()

    def count(self, request: Request, ending: Ending) -> None:
        """Count the request once, as `ending` (an error as its outcome label)."""
        if request.counted:
            return
        request.counted = True
        if isinstance(ending, RouterError):
            ending = outcome_of(ending)
        request.outcome = ending
        duration_s = self.clock() - request.started_s
        self._metrics.observe_request(request.route, ending, duration_s)

    def free(self, request: Request) -> None:
        """A decided request's tenant share and slot are free, and its queue is told (once;
        nothing for a request never decided)."""
        if request.ended or not request.is_decided:
            return
        request.ended = True
        if self._step is not None:
            self._step.finished(request)
        if self._queue is not None:
            self._queue.finished()
