"""Gateway mode's own requests, from the decision to the end of their answer (docs/gateway.md,
"Load and shedding", "Flow control"): a request every pair is full for is held in the HTTP
door's queue (`flow.queue.FlowQueue`, the same bands, tenant turns and deadlines) while
its ext_proc stream waits unanswered; once routed it counts at one endpoint of its pair
until its answer ends, and its end wakes the queue.

Where it counts: Envoy's endpoint picker, not Gearbox, picks the pod, so a routed request
is counted at the endpoint its decision put first (the less loaded of two of its pair as
Gearbox sees them, `decision.feasibility.order_endpoints`). The scrape subtracts its own
requests from that endpoint's scraped count (`LoadTracker.set_queue_depth`). Where the
picker chose another pod, the pair's total can count a request twice (its own count at the
guessed endpoint, the scrape at its pod) while the guessed endpoint's scraped count is
below Gearbox's own count there: an over-count, which queues sooner, never more traffic.

When it ends: at the first of the response body's last chunk (`end_of_stream`), response
headers that end the response, or the ext_proc stream's end (Envoy closes it when the HTTP
request is over, however it ended: answered, reset, the client gone). Only a filter that
sends the response phase keeps the stream open to the answer's end; without it the count
may end when the request phase does (docs/gateway.md says which configuration gives what).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from data_plane.asked import Full
from data_plane.decision_step import Decided, DecisionStep
from data_plane.flow.queue import FlowQueue
from data_plane.request.body import BodyKind
from data_plane.resilience.endpoint_load import LoadTracker


class Running:
    """One routed request until its answer ends (`end`, idempotent): its count at an
    endpoint, its tenant's share, and the queue's wake-up when it goes."""

    __slots__ = ("_door", "_endpoint", "_over", "decided")

    def __init__(self, door: GatewayDoor, decided: Decided) -> None:
        self._door = door
        self.decided = decided
        self._over = False
        first = decided.decision.candidates[0]
        self._endpoint = first.endpoints[0].id if first.endpoints else None
        if self._endpoint is not None:
            door.tracker.acquire(self._endpoint)

    def end(self) -> None:
        if self._over:
            return
        self._over = True
        door = self._door
        if self._endpoint is not None:
            door.tracker.release(self._endpoint)
        door.step.finished(self.decided)
        if door.queue is not None:
            door.queue.finished()


@dataclass(frozen=True, slots=True)
class GatewayDoor:
    """The decision step, the queue (None: refused at once) and the in-flight counts."""

    step: DecisionStep
    tracker: LoadTracker
    queue: FlowQueue | None = None

    def decide(self, kind: BodyKind, headers: Mapping[str, str], body: bytes) -> Running:
        """The request decided now (raises the RouterError its client gets at once), or
        `Full` when every pair that meets it is full and the queue may hold it (`wait`)."""
        may_wait = self.queue is not None
        return Running(self, self.step.decide(body, kind, headers, may_wait=may_wait))

    async def wait(self, full: Full, arrived: float) -> Running:
        """`full` decided once a pair has room (raises its 429 at its deadline or a bound);
        `arrived`: the loop time its headers came at (its budget runs from then)."""
        if self.queue is None:  # `decide` raises Full only with a queue
            raise RuntimeError("no queue to wait in")
        return Running(self, await self.queue.wait(full, arrived))
