"""Gateway mode's requests in flight (`gateway.in_flight`, docs/gateway.md, "Flow control"):
a request dispatched from the queue counts at its endpoint from its decision on, as in the
HTTP door (`endpoint_load.Slot`), not from when its ext_proc stream's task runs again."""

from __future__ import annotations

import asyncio
import json
import random

from data_plane.asked import Full
from data_plane.decision.compile import compile_table
from data_plane.decision_step import default_admission
from data_plane.gateway.headers import HeaderList
from data_plane.gateway.router import GatewayRouter, gateway_router
from data_plane.resilience.endpoint_load import LoadTracker
from data_plane.serving.lifecycle import Finish, Request
from data_plane.settings import FlowSettings
from data_plane.table_store import TableStore
from data_plane.telemetry.metrics import DataPlaneMetrics, Route
from tests.support.waiting import eventually
from tests.unit.data_plane.tables import entry, table

ENDPOINT = "llama@fp8#0"
CHAT = {"model": "llama@fp8", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
HEADERS = HeaderList([("x-latency-budget-ms", "5000")])


def router_on(tracker: LoadTracker) -> GatewayRouter:
    """One pair, one endpoint, that sustains 4 requests within 5 s, 3 of them standard."""
    store = TableStore()
    store.swap(compile_table(table([entry("llama", "fp8", tpot_per_load_s=0.1)])))
    metrics = DataPlaneMetrics("test", "test")
    args = (store, metrics, random.Random(7), "x-gearbox-pair", default_admission(), tracker)
    return gateway_router(*args, FlowSettings())


def route(router: GatewayRouter) -> Request | Full:
    """A request routed (its hold kept until `Finish.free`), or its `Full`."""
    request = Request("", Route.CHAT_COMPLETIONS, 0.0)
    try:
        router.route(request, "chat", HEADERS, json.dumps(CHAT).encode())
    except Full as full:
        return full
    return request


async def waited(router: GatewayRouter, full: Full, arrived: float) -> Request:
    request = Request("", Route.CHAT_COMPLETIONS, 0.0)
    await router.wait(request, full, arrived)
    return request


async def test_two_requests_ending_in_one_turn_dispatch_no_more_than_the_slots_they_free() -> None:
    """Three routed requests hold the pair's line and three wait; two end in one turn of the
    event loop: each end dispatches one, and the third waits. On 8c8a749 a dispatched
    request was counted only once its task ran again, so the second end's wake-up, and the
    next, saw the slot the first took as free and sent all three (4 at the endpoint)."""
    tracker = LoadTracker()
    router = router_on(tracker)
    routed: list[Request] = []
    while not isinstance(answer := route(router), Full):
        routed.append(answer)
    assert len(routed) == 3
    queue = router.door.queue
    assert queue is not None
    end = Finish(DataPlaneMetrics("test", "test"), router.door.step, queue).free
    arrived = asyncio.get_running_loop().time()
    fulls = [answer, route(router), route(router)]
    waits = [asyncio.create_task(waited(router, f, arrived)) for f in fulls if isinstance(f, Full)]
    await eventually(lambda: len(queue) == 3, what="three wait")
    end(routed[0])  # both end in one turn of the loop
    end(routed[1])
    await eventually(lambda: sum(w.done() for w in waits) >= 2, what="two dispatched")
    assert len(queue) == 1
    assert tracker.in_flight(ENDPOINT) == 3
    for request in (routed[2], *(w.result() for w in waits if w.done())):
        end(request)
    await eventually(lambda: all(w.done() for w in waits), what="the third dispatched")
    end(waits[2].result())
    assert tracker.in_flight(ENDPOINT) == 0
