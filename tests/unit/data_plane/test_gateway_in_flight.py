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
from data_plane.gateway.in_flight import Running
from data_plane.gateway.router import GatewayRouter, Routed, gateway_router
from data_plane.resilience.endpoint_load import LoadTracker
from data_plane.settings import FlowSettings
from data_plane.table_store import TableStore
from data_plane.telemetry.metrics import DataPlaneMetrics
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


def route(router: GatewayRouter) -> tuple[Routed, Running] | Full:
    try:
        return router.route("chat", HEADERS, json.dumps(CHAT).encode())
    except Full as full:
        return full


async def test_two_requests_ending_in_one_turn_dispatch_no_more_than_the_slots_they_free() -> None:
    """Three routed requests hold the pair's line and three wait; two end in one turn of the
    event loop: each end dispatches one, and the third waits. On 8c8a749 a dispatched
    request was counted only once its task ran again, so the second end's wake-up, and the
    next, saw the slot the first took as free and sent all three (4 at the endpoint)."""
    tracker = LoadTracker()
    router = router_on(tracker)
    routed: list[Running] = []
    while not isinstance(answer := route(router), Full):
        routed.append(answer[1])
    assert len(routed) == 3
    queue = router.door.queue
    assert queue is not None
    arrived = asyncio.get_running_loop().time()
    fulls = [answer, route(router), route(router)]
    waits = [asyncio.create_task(router.wait(f, arrived)) for f in fulls if isinstance(f, Full)]
    await eventually(lambda: len(queue) == 3, what="three wait")
    routed[0].end()  # both end in one turn of the loop
    routed[1].end()
    await eventually(lambda: sum(w.done() for w in waits) >= 2, what="two dispatched")
    assert len(queue) == 1
    assert tracker.in_flight(ENDPOINT) == 3
    for running in (routed[2], *(w.result()[1] for w in waits if w.done())):
        running.end()
    await eventually(lambda: all(w.done() for w in waits), what="the third dispatched")
    waits[2].result()[1].end()
    assert tracker.in_flight(ENDPOINT) == 0
