"""Gateway mode keeps the higher bands' reserve as the HTTP door does (docs/data_plane.md,
"Flow control"; `gateway.router.gateway_router` gives its decision step the band arrivals):
critical requests routed in the last second keep a standard request off the slots their
rate needs; a second later it is routed."""

from __future__ import annotations

import json
import random
from dataclasses import replace

from data_plane.asked import Full
from data_plane.decision.compile import compile_table
from data_plane.decision_step import default_admission
from data_plane.gateway.headers import HeaderList
from data_plane.gateway.router import GatewayRouter, gateway_router
from data_plane.request.identity import Rights
from data_plane.resilience.band_arrivals import BUCKET_S, WINDOW_S
from data_plane.resilience.endpoint_load import LoadTracker
from data_plane.serving.lifecycle import Finish, Request
from data_plane.settings import FlowSettings
from data_plane.table_store import TableStore
from data_plane.telemetry.metrics import DataPlaneMetrics, Route
from tests.unit.data_plane.tables import entry, table

CHAT = {"model": "llama@fp8", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
BUDGET = [("x-latency-budget-ms", "5000")]
CRITICAL = HeaderList([*BUDGET, ("x-priority", "critical")])
STANDARD = HeaderList(BUDGET)


class _Clock:
    def __init__(self) -> None:
        self.now = 50.05  # mid-bucket

    def __call__(self) -> float:
        return self.now


def router_on(clock: _Clock) -> GatewayRouter:
    """One pair, one endpoint, that sustains 4 requests within 5 s (about 0.17 s + 1 s per
    request in flight), 3 of them standard once pressed; the priority header trusted."""
    store = TableStore()
    store.swap(compile_table(table([entry("llama", "fp8", tpot_per_load_s=0.1)])))
    admission = replace(default_admission(), rights=Rights(priority_header_trusted=True))
    args = (store, DataPlaneMetrics("test", "test"), random.Random(7), "x-gearbox-pair")
    return gateway_router(*args, admission, LoadTracker(), FlowSettings(), clock=clock)


def route(router: GatewayRouter, headers: HeaderList) -> Request | Full:
    """A request routed (its hold kept until `Finish.free`), or its `Full`."""
    request = Request("", Route.CHAT_COMPLETIONS, 0.0)
    try:
        router.route(request, "chat", headers, json.dumps(CHAT).encode())
    except Full as full:
        return full
    return request


def ender(router: GatewayRouter) -> Finish:
    queue = router.door.queue
    assert queue is not None
    return Finish(DataPlaneMetrics("test", "test"), router.door.step, queue)


async def test_critical_requests_routed_lately_keep_a_standard_one_off_their_slots() -> None:
    """2 critical requests in flight and in the last second (2 a second x the pair's ~3.2 s
    at 4 hold more than its 4): a standard request beside them waits (without them it is
    the 3rd of 4 and goes in); once the window passes, with the two still in flight, it is
    routed."""
    clock = _Clock()
    router = router_on(clock)
    critical = [route(router, CRITICAL) for _ in range(2)]
    assert not any(isinstance(c, Full) for c in critical)
    clock.now += BUCKET_S
    assert isinstance(route(router, STANDARD), Full)
    clock.now += WINDOW_S  # the two still in flight, their arrivals out of the window
    later = route(router, STANDARD)
    assert not isinstance(later, Full)
    finish = ender(router)
    for routed in (*critical, later):
        assert not isinstance(routed, Full)
        finish.free(routed)


async def test_without_critical_traffic_a_standard_request_beside_two_goes_in() -> None:
    """The same two in flight, standard: nothing is reserved and the third goes in."""
    router = router_on(_Clock())
    held = [route(router, STANDARD) for _ in range(2)]
    assert not any(isinstance(h, Full) for h in held)
    assert not isinstance(route(router, STANDARD), Full)
