"""The HTTP door's queue (docs/data_plane.md, "Flow control"): a request every pair is full
for waits in this replica's queue instead of a 429, is dispatched when a request finishes,
and is refused only once its budget no longer allows the wait."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

from contracts.routing_table import RoutingTable
from data_plane.upstream.port import UpstreamRequest
from tests.component.data_plane.conftest import CHAT_BODY, Harness, MakeHarness
from tests.component.data_plane.fakes import FakeResponse, chat_json, make_table, pair_entry
from tests.support.waiting import eventually

URL = "http://fp16-a"
BODY = json.dumps(CHAT_BODY).encode()
STANDARD = {"priority": "standard"}


def one_slot() -> RoutingTable:
    """One pair predicted at 1.008 s for the 8-token answer, profiled at one request at a
    time: full with one in flight, whatever the class."""
    entry = pair_entry("fam", "fp16", urls=[URL], ttft_base_s=1.0)
    entry["latency"]["max_profiled_load"] = 1
    return make_table([entry])


def holding(seconds: float) -> dict[str, Callable[[UpstreamRequest], FakeResponse]]:
    return {URL: lambda r: FakeResponse(body=chat_json(), delays_s={0: seconds})}


def held_until(release: asyncio.Event) -> dict[str, Callable[[UpstreamRequest], FakeResponse]]:
    """Answers held until the test sets `release`: a request that must find the pair full is
    sent while it is, however slow the machine (a 0.3 s hold ran out first in a make test
    beside other suites: the second request went in without waiting)."""
    return {URL: lambda r: FakeResponse(body=chat_json(), gate=release)}


async def ask(h: Harness, headers: dict[str, str]) -> tuple[int, dict[str, str]]:
    resp = await h.client.post("/v1/chat/completions", data=BODY, headers=headers)
    await resp.read()
    return resp.status, dict(resp.headers)


async def test_a_request_waits_for_a_full_pair_and_goes_in_when_one_finishes(
    make_harness: MakeHarness,
) -> None:
    release = asyncio.Event()
    h = await make_harness(one_slot(), routes=held_until(release), engine_deadline_factor=0)
    first = asyncio.create_task(ask(h, {}))
    await eventually(lambda: len(h.upstream.requests) == 1, what="the first holds the pair")
    second = asyncio.create_task(ask(h, {}))
    await eventually(
        lambda: h.metric("gearbox_flow_queue_length", **STANDARD) == 1, what="it waits"
    )
    assert len(h.upstream.requests) == 1  # not sent to the full pair
    release.set()
    assert [s for s, _ in await asyncio.gather(first, second)] == [200, 200]
    assert len(h.upstream.requests) == 2
    assert h.metric("gearbox_flow_queue_length", **STANDARD) == 0
    assert h.metric("gearbox_flow_dispatched_total", **STANDARD) == 1
    assert h.metric("gearbox_flow_queued_total", tenant="anonymous", **STANDARD) == 1
    assert h.metric("gearbox_tenant_shed_total", tenant="anonymous", **STANDARD) == 0


async def test_a_waiting_request_is_refused_once_its_budget_cannot_be_met(
    make_harness: MakeHarness,
) -> None:
    """A 1.3 s budget for a 1.008 s answer leaves 0.29 s to wait; the pair is held for 5 s."""
    h = await make_harness(one_slot(), routes=holding(5.0), engine_deadline_factor=0)
    hold = asyncio.create_task(ask(h, {}))
    await eventually(lambda: len(h.upstream.requests) == 1, what="the pair is held")
    status, headers = await ask(h, {"X-Latency-Budget-Ms": "1300"})
    assert status == 429
    assert int(headers["Retry-After"]) >= 1
    assert headers["x-should-retry"] == "true"
    assert len(h.upstream.requests) == 1  # never sent
    assert h.metric("gearbox_flow_refused_total", reason="deadline", **STANDARD) == 1
    assert h.metric("gearbox_tenant_shed_total", tenant="anonymous", **STANDARD) == 1
    assert h.metric("gearbox_flow_queue_length", **STANDARD) == 0
    hold.cancel()


async def test_a_tenant_past_its_share_waits_while_the_other_goes_in(
    make_harness: MakeHarness,
) -> None:
    """A pair that sustains 4 at the flat shares (every class may fill it): a tenant holding
    2 beside another's 1 waits for its third, while the other tenant's second goes in; the
    third goes in when one of its tenant's first two finishes, and nobody is refused."""
    entry = pair_entry("fam", "fp16", urls=[URL], ttft_base_s=1.0)
    entry["latency"]["max_profiled_load"] = 4
    table = make_table([entry], policy={"priorities": {"standard": {"share": 1.0}}})
    release = asyncio.Event()
    h = await make_harness(table, routes=held_until(release), engine_deadline_factor=0)
    bursty, steady = {"x-gearbox-tenant": "bursty"}, {"x-gearbox-tenant": "steady"}
    burst = [asyncio.create_task(ask(h, bursty)) for _ in range(2)]
    await eventually(lambda: len(h.upstream.requests) == 2, what="the burst holds two")
    first = asyncio.create_task(ask(h, steady))
    await eventually(lambda: len(h.upstream.requests) == 3, what="the steady one goes in")
    third = asyncio.create_task(ask(h, bursty))
    await eventually(
        lambda: h.metric("gearbox_flow_queue_length", **STANDARD) == 1, what="it waits"
    )
    second = asyncio.create_task(ask(h, steady))
    await eventually(lambda: len(h.upstream.requests) == 4, what="the steady one's second")
    release.set()
    statuses = [s for s, _ in await asyncio.gather(*burst, first, third, second)]
    assert statuses == [200] * 5
    assert h.metric("gearbox_flow_queued_total", tenant="bursty", **STANDARD) == 1
    assert h.metric("gearbox_flow_queued_total", tenant="steady", **STANDARD) == 0


async def test_a_client_that_goes_away_leaves_the_queue_at_once(
    make_harness: MakeHarness,
) -> None:
    """Served with `handler_cancellation` (as data_plane/__main__.py serves, and aiohttp's
    TestServer always does): the waiting request's client gives up, its handler is cancelled
    and the queue is empty again while the pair is still held."""
    h = await make_harness(one_slot(), routes=holding(60.0), engine_deadline_factor=0)
    hold = asyncio.create_task(ask(h, {}))
    await eventually(lambda: len(h.upstream.requests) == 1, what="the pair is held")
    gone = asyncio.create_task(ask(h, {}))
    await eventually(
        lambda: h.metric("gearbox_flow_queue_length", **STANDARD) == 1, what="it waits"
    )
    gone.cancel()  # the client closes its connection
    await eventually(lambda: h.metric("gearbox_flow_queue_length", **STANDARD) == 0, what="it left")
    assert not hold.done()
    assert len(h.upstream.requests) == 1
    hold.cancel()
