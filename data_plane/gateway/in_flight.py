"""Gateway mode's own requests, from the decision to the end of their answer (docs/gateway.md,
"Load and shedding", "Flow control"): a request every pair is full for is held in the HTTP
door's queue (`flow.queue.FlowQueue`, the same bands, tenant turns and deadlines) while
its ext_proc stream waits unanswered; once routed it counts at one endpoint of its pair
until its answer ends, and its end wakes the queue.

Where it counts: Envoy's endpoint picker, not Gearbox, picks the pod, so a routed request
is counted at the endpoint its decision put first (the less loaded of two of its pair as
Gearbox sees them, `decision.feasibility.order_endpoints`), from the decision on
(`endpoint_load.Slot`, as in the HTTP door): a request dispatched from the queue is counted
before its stream's task runs again, so no other wake-up sees its slot free. The scrape
subtracts its own requests from that endpoint's scraped count
(`LoadTracker.set_queue_depth`). Where the picker chose another pod, the pair's total can
count a request twice (its own count at the guessed endpoint, the scrape at its pod) while
the guessed endpoint's scraped count is below Gearbox's own count there: an over-count,
which queues sooner, never more traffic. Its tenant's share is counted from the decision to
the end too (`resilience.tenant_load`, the HTTP door's fair shares).

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
from data_plane.decision_step import DecisionStep
from data_plane.flow.queue import FlowQueue
from data_plane.request.body import BodyKind
from data_plane.request.prompt_tokens import PromptCount
from data_plane.serving.lifecycle import Request


@dataclass(frozen=True, slots=True)
class GatewayDoor:
    """The decision step (whose `StepParts.slots` count each request in flight from its
    decision on) and the queue (None: refused at once). A request it decided counts, at an
    endpoint and in its tenant's share, until its door's `Finish.free` (its answer's end)."""

    step: DecisionStep
    queue: FlowQueue | None = None

    def decide(
        self,
        request: Request,
        kind: BodyKind,
        headers: Mapping[str, str],
        body: bytes,
        counted: PromptCount | None = None,
    ) -> None:
        """`request` decided now (raises the RouterError its client gets at once), or
        `Full` when every pair that meets it is full and the queue may hold it (`wait`), or
        when a request of a higher band waits for one of its pairs (strict bands, as in the
        HTTP door)."""
        queue = self.queue
        self.step.decide(request, body, kind, headers, queue is not None, queue, counted)

    async def wait(self, request: Request, full: Full, arrived: float) -> None:
        """`request` (as `full`) decided once a pair has room (raises its 429 at its
        deadline or a bound); `arrived`: the loop time its headers came at (its budget runs
        from then)."""
        if self.queue is None:  # `decide` raises Full only with a queue
            raise RuntimeError("no queue to wait in")
        await self.queue.wait(request, full, arrived)
