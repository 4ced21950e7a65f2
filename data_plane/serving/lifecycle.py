"""One client request from its door to its end, whichever door it came through
(docs/design.md, "One request, by capability").

The door creates the `Request` (the HTTP middleware, gateway mode's ext_proc stream): its id,
its route, when it started. The decision step fills it in (it is a `decision_step.Decidable`:
the table, the request as read, the decision, the tenant, class and client, its fair-share hold
and in-flight slot, its wait in the queue), and every later step reads `request.decision`,
`request.table` ... off it. The door ends it with `Finish.finish`, the one ending both doors
share: the error-to-outcome mapping (`telemetry.request_outcome`), the request counted
(`gearbox_requests_total{outcome}` and its duration, once), and its flow-control slot and fair
share freed, with the queue told (once). Gateway mode counts a request when it is answered
(routed, or refused) and frees its hold when its answer ends (`gateway.in_flight`), so it
calls `count` first and `finish` at the end; the HTTP door does both at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from data_plane.decision_step import Decidable
from data_plane.domain import Candidate
from data_plane.errors import RouterError
from data_plane.telemetry.metrics import DataPlaneMetrics, RequestOutcome, Route
from data_plane.telemetry.request_outcome import outcome_of

if TYPE_CHECKING:  # the attempt module's `Call` holds a Request
    from data_plane.serving.attempt import Failed

Ending = RequestOutcome | RouterError


class Step(Protocol):
    """What frees a decided request's tenant share and slot (`DecisionStep.finished`)."""

    def finished(self, request: Decidable) -> None: ...


class Queue(Protocol):
    """The door's queue, told that a request ended (`flow.queue.FlowQueue.finished`)."""

    def finished(self) -> None: ...


class Request(Decidable):
    """One client request: created by its door, filled in by the decision step, walked through its
    chain by the HTTP door's proxy, ended by `Finish`. `outcome`: what it came to so far (the
    door sets it; `Finish.count` maps an error to it).

    Where its walk stands (the HTTP door; `serving/walk.py`): the proxy moves it, the attempt
    runner and delivery read and note what they see. `attempts` is its one counter of engine
    attempts (the walk's retry policy reads it, each attempt is numbered by it, and an error
    after one says "do not retry"). The live checks' own asks are Requests too, never
    decided and never counted."""

    __slots__ = (
        "attempts",
        "counted",
        "ended",
        "failure",
        "id",
        "last",
        "load_met",
        "outcome",
        "route",
        "started_s",
        "stopped",
        "streaming_pair",
    )

    def __init__(self, request_id: str, route: Route, started_s: float) -> None:
        super().__init__()
        self.id = request_id
        self.route = route
        self.started_s = started_s  # on its door's clock: its duration runs from then
        self.outcome = RequestOutcome.OK
        self.counted = False  # `gearbox_requests_total` has it
        self.ended = False  # its hold and slot are free, the queue told
        self.attempts = 0
        self.failure: Failed | None = None  # the last attempt's, while no answer is in hand
        self.last: Candidate | None = None  # the candidate of the walk's last attempt
        self.stopped = False  # retry policy or retry budget said stop (no relaxed fallback)
        self.streaming_pair: str | None = None  # the pair whose stream the client is reading
        # The most requests in flight at its last attempt's endpoint, at that attempt's start
        # or end (this one included): the load its answer met, which later arrivals raise
        # above the decision's (`resilience.overshoot` predicts at it).
        self.load_met = 0.0


class Finish:
    """How a door ends its requests (one per door: its metrics, its decision step and its
    queue, None where it keeps none; `clock`: the one its requests' `started_s` are on)."""

    __slots__ = ("_clock", "_metrics", "_queue", "_step")

    def __init__(
        self,
        metrics: DataPlaneMetrics,
        step: Step | None = None,
        queue: Queue | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._metrics = metrics
        self._step = step
        self._queue = queue
        self._clock = clock

    def finish(self, request: Request, ending: Ending | None = None) -> None:
        """The request is over (answered, failed or cancelled): counted with `ending` unless
        it was counted already (None: not counted at all), then freed (`free`)."""
        if ending is not None:
            self.count(request, ending)
        self.free(request)

    def count(self, request: Request, ending: Ending) -> None:
        """Count the request once, as `ending` (an error as its outcome label)."""
        if request.counted:
            return
        request.counted = True
        if isinstance(ending, RouterError):
            ending = outcome_of(ending)
        request.outcome = ending
        duration_s = self._clock() - request.started_s
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
