"""The higher bands' reserve (docs/data_plane.md, "Flow control"; issue 32): while critical
requests arrive at a pair, a standard request may not take the slots their rate will need
(running requests are not pre-empted), and once they stop for the window (1 s), standard
fills its full line again. On a real app (both doors share the decision step) with a fake
engine whose answers the test holds, and the harness's clock, which moves only when the test
moves it (the window is read from whole 100 ms buckets of it)."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable

from contracts.routing_table import RoutingTable
from data_plane.resilience.band_arrivals import BUCKET_S, WINDOW_S
from data_plane.upstream.port import UpstreamRequest
from tests.component.data_plane.conftest import CHAT_BODY, Harness, MakeHarness
from tests.component.data_plane.fakes import FakeResponse, chat_json, make_table, pair_entry
from tests.support.waiting import eventually

URL = "http://fp16-a"
BODY = json.dumps(CHAT_BODY).encode()
BUDGET = {"X-Latency-Budget-Ms": "10000"}
CRITICAL = {**BUDGET, "X-Priority": "critical"}
STANDARD = {"priority": "standard"}


def eight_slots() -> RoutingTable:
    """One pair predicted at 1.008 s for the 8-token answer at any load up to 8: it sustains
    8; the standard class (0.75) may fill 6 once the fleet is pressed."""
    entry = pair_entry("fam", "fp16", urls=[URL], ttft_base_s=1.0)
    entry["latency"]["max_profiled_load"] = 8
    return make_table([entry])


def held_after(
    answered: int, release: asyncio.Event
) -> dict[str, Callable[[UpstreamRequest], FakeResponse]]:
    """The first `answered` requests are answered at once, the rest held until `release`."""
    count = itertools.count()
    return {
        URL: lambda r: FakeResponse(
            body=chat_json(), gate=None if next(count) < answered else release
        )
    }


def _sent(h: Harness, n: int) -> Callable[[], bool]:
    return lambda: len(h.upstream.requests) == n


async def ask(h: Harness, headers: dict[str, str]) -> int:
    resp = await h.client.post("/v1/chat/completions", data=BODY, headers=headers)
    await resp.read()
    return resp.status


async def test_critical_arrivals_keep_a_standard_request_off_the_slots_their_rate_needs(
    make_harness: MakeHarness,
) -> None:
    """4 critical requests in the last second at 1.008 s each hold 4.03 of the pair's 8:
    a standard request beside the 4 in flight (5 with it, the fleet not pressed) waits, where
    before it went in; the next critical request still goes in at once. Fails on main: the
    standard request is sent as the 5th."""
    release = asyncio.Event()
    h = await make_harness(
        eight_slots(), routes=held_after(0, release), engine_deadline_factor=0,
        priority_header_trusted=True,
    )  # fmt: skip
    critical = [asyncio.create_task(ask(h, CRITICAL)) for _ in range(4)]
    await eventually(lambda: len(h.upstream.requests) == 4, what="4 critical in flight")
    h.clock.advance(BUCKET_S)  # their bucket is whole: the rate counts them
    standard = asyncio.create_task(ask(h, BUDGET))
    await eventually(lambda: h.metric("gearbox_flow_queue_length", **STANDARD) == 1, what="waits")
    assert len(h.upstream.requests) == 4  # not sent into the reserve
    fifth = asyncio.create_task(ask(h, CRITICAL))
    await eventually(lambda: len(h.upstream.requests) == 5, what="the critical one goes in")
    assert h.metric("gearbox_flow_queue_length", **STANDARD) == 1
    release.set()
    assert list(await asyncio.gather(*critical, fifth, standard)) == [200] * 6
    assert h.metric("gearbox_flow_dispatched_total", **STANDARD) == 1
    assert h.metric("gearbox_tenant_shed_total", tenant="anonymous", **STANDARD) == 0


async def test_once_critical_requests_stop_for_the_window_standard_fills_its_whole_line(
    make_harness: MakeHarness,
) -> None:
    """8 critical requests answered, then the window passes: 6 standard requests go in (its
    line, 6 of 8, once the fleet is pressed) and the 7th waits, as without any critical
    traffic: nothing changes outside a surge, and one burst of a higher band reserves for
    at most the window. (Passes on main too: a guard that the reserve goes.)"""
    release = asyncio.Event()
    h = await make_harness(
        eight_slots(), routes=held_after(8, release), engine_deadline_factor=0,
        priority_header_trusted=True,
    )  # fmt: skip
    assert list(await asyncio.gather(*(ask(h, CRITICAL) for _ in range(8)))) == [200] * 8
    h.clock.advance(WINDOW_S + BUCKET_S)
    standard = []
    for n in range(1, 7):
        standard.append(asyncio.create_task(ask(h, BUDGET)))
        await eventually(_sent(h, 8 + n), what=f"standard request {n} sent")
    seventh = asyncio.create_task(ask(h, BUDGET))
    await eventually(lambda: h.metric("gearbox_flow_queue_length", **STANDARD) == 1, what="waits")
    assert len(h.upstream.requests) == 14
    release.set()
    assert list(await asyncio.gather(*standard, seventh)) == [200] * 7


async def test_a_client_without_the_right_to_critical_reserves_nothing_by_claiming_it(
    make_harness: MakeHarness,
) -> None:
    """The same 4 requests claiming critical, from a client the router does not trust with
    the class (no trusted header setting, no keys): they count as standard, so they reserve
    nothing and another standard request goes in beside them at once."""
    release = asyncio.Event()
    h = await make_harness(eight_slots(), routes=held_after(0, release), engine_deadline_factor=0)
    claimed = [asyncio.create_task(ask(h, CRITICAL)) for _ in range(4)]
    await eventually(lambda: len(h.upstream.requests) == 4, what="4 in flight")
    h.clock.advance(BUCKET_S)
    other = asyncio.create_task(ask(h, BUDGET))
    await eventually(lambda: len(h.upstream.requests) == 5, what="the standard one goes in")
    assert h.metric("gearbox_flow_queue_length", **STANDARD) == 0
    release.set()
    assert list(await asyncio.gather(*claimed, other)) == [200] * 5
