"""Gateway mode's flow control over a real gRPC connection (docs/gateway.md, "Flow control";
issue 32 item 6): a request every pair is full for is held with its ext_proc stream
unanswered, routed when a request ends, refused at its deadline, taken out of the queue
when Envoy closes its stream, and dispatched by band, then tenant turn."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from data_plane.decision.compile import compile_table
from data_plane.decision_step import default_admission
from data_plane.flow.queue import FlowQueue
from data_plane.gateway import protos as ext_proc
from data_plane.gateway.router import gateway_router
from data_plane.gateway.service import ExternalProcessor, ServiceConfig, start_server
from data_plane.resilience.endpoint_load import LoadTracker
from data_plane.settings import FlowSettings
from data_plane.table_store import TableStore
from data_plane.telemetry.metrics import DataPlaneMetrics
from tests.component.data_plane.test_gateway_extproc import (
    BUFFERED,
    FULL_DUPLEX,
    PAIR_HEADER,
    Gateway,
    body_message,
    error_of,
    headers_message,
    set_headers,
)
from tests.support.extproc_client import ExternalProcessorStub
from tests.support.waiting import eventually
from tests.unit.data_plane.tables import entry, table

ENDPOINT = "llama@fp8#0"
# One pair, one endpoint, whose answers slow a lot with load: at 10 output tokens an answer
# takes about 0.17 s + 1 s per request in flight, so a 5 s budget holds at a few requests
# in flight and a held request's deadline is about 3.8 s after it arrives.
CHAT = {"model": "llama@fp8", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
BUDGET = {"x-latency-budget-ms": "5000"}
REQUESTS = "gearbox_requests_total"


@dataclass
class Door(Gateway):
    """The gateway, its in-flight counts and its queue."""

    tracker: LoadTracker
    queue: FlowQueue


@asynccontextmanager
async def door_with(
    limits: FlowSettings, max_hold_s: float | None = None, tpot_per_load_s: float = 0.1
) -> AsyncIterator[Door]:
    """The gateway on one pair whose answers slow by `tpot_per_load_s` per output token and
    request in flight (`ENDPOINT`'s)."""
    store, metrics, tracker = TableStore(), DataPlaneMetrics("test", "test"), LoadTracker()
    store.swap(compile_table(table([entry("llama", "fp8", tpot_per_load_s=tpot_per_load_s)])))
    router = gateway_router(
        store,
        metrics,
        random.Random(7),
        PAIR_HEADER,
        default_admission(),
        tracker,
        limits,
        max_hold_s,
        clock=lambda: 0.0,  # fair shares: a tenant refused once stays active all the test
    )
    assert router.door.queue is not None
    processor = ExternalProcessor(router, metrics, ServiceConfig(BUFFERED, 64 * 1024))
    server, port = await start_server(processor, "127.0.0.1", 0)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        stub = ExternalProcessorStub(channel)
        yield Door(stub, store, metrics, tracker, router.door.queue)
    finally:
        await channel.close()
        await server.stop(None)


@pytest.fixture
async def door() -> AsyncIterator[Door]:
    async with door_with(FlowSettings()) as made:
        yield made


class Stream:
    """One ext_proc stream as Envoy keeps it: the request phase sent, the answer to it
    awaited in `first`, the stream open until `finish` (the response phase) or `close`."""

    def __init__(self, door: Gateway, headers: dict[str, str], mode: int = FULL_DUPLEX) -> None:
        self.call = door.stub.Process()
        self._headers, self._mode = {**BUDGET, **headers}, mode
        self.first: asyncio.Task[Any] | None = None

    async def open(self) -> Stream:
        await self.call.write(headers_message(self._headers, mode=self._mode))
        if self._mode == BUFFERED:  # the headers are answered at once; the body is held
            answer = await self.call.read()
            assert answer.WhichOneof("response") == "request_headers"
        await self.call.write(body_message(json.dumps(CHAT).encode(), True))
        self.first = asyncio.create_task(self.call.read())
        return self

    @property
    def answered(self) -> bool:
        return self.first is not None and self.first.done()

    def pair(self) -> str:
        assert self.first is not None
        response = self.first.result()
        common = (
            response.request_headers.response
            if self._mode == FULL_DUPLEX
            else response.request_body.response
        )
        return set_headers(common)[PAIR_HEADER]

    async def finish(self) -> None:
        """Envoy's response phase: headers, then the body's last chunk (the answer's end)."""
        if self._mode == FULL_DUPLEX:
            assert (await self.call.read()).WhichOneof("response") == "request_body"
        response_headers = ext_proc.ProcessingRequest(
            response_headers=ext_proc.HttpHeaders(headers=ext_proc.HeaderMap())
        )
        await self.call.write(response_headers)
        assert (await self.call.read()).WhichOneof("response") == "response_headers"
        last = ext_proc.ProcessingRequest(
            response_body=ext_proc.HttpBody(body=b"data: [DONE]\n\n", end_of_stream=True)
        )
        await self.call.write(last)
        assert (await self.call.read()).WhichOneof("response") == "response_body"

    async def close(self) -> None:
        self.call.cancel()
        if self.first is not None:
            await asyncio.gather(self.first, return_exceptions=True)


async def held_or_routed(door: Door, stream: Stream) -> bool:
    """Open `stream`; True once it waits in the queue, False once it is answered."""
    waiting = len(door.queue)
    await stream.open()
    await eventually(lambda: stream.answered or len(door.queue) > waiting, what="held or routed")
    return not stream.answered


async def fill(door: Door, headers: dict[str, str] | None = None) -> list[Stream]:
    """Routed streams of one tenant (`headers`; anonymous by default), kept open, until the
    pair is full for it: the last one opened was held, and is gone."""
    routed: list[Stream] = []
    while len(routed) < 20:
        stream = Stream(door, headers or {})
        if await held_or_routed(door, stream):
            await stream.close()
            await eventually(lambda: len(door.queue) == 0, what="the probe left the queue")
            return routed
        assert stream.pair() == "llama@fp8"
        routed.append(stream)
    raise AssertionError("20 requests routed and the pair still had room")


async def test_a_held_request_is_routed_when_a_routed_one_ends(door: Door) -> None:
    routed = await fill(door)
    assert len(routed) >= 1
    assert door.tracker.in_flight(ENDPOINT) == len(routed)
    held = Stream(door, {})
    assert await held_or_routed(door, held)
    assert door.tracker.in_flight(ENDPOINT) == len(routed)  # a waiting request is no load
    await routed[0].finish()  # its answer ended: a slot is free
    await eventually(lambda: held.answered, what="the held request routed")
    assert held.pair() == "llama@fp8"
    assert len(door.queue) == 0
    assert door.tracker.in_flight(ENDPOINT) == len(routed)  # one ended, one began
    assert door.metric("gearbox_flow_dispatched_total", priority="standard") == 1.0
    other = Stream(door, {}, mode=BUFFERED)  # the body phase held, in buffered mode
    assert await held_or_routed(door, other)
    await held.close()  # no response phase: Envoy closed the stream, the request is over
    await eventually(lambda: other.answered, what="routed once a stream closed")
    assert other.pair() == "llama@fp8"
    for stream in (*routed, other):
        await stream.close()
    await eventually(lambda: door.tracker.in_flight(ENDPOINT) == 0, what="all ended")


async def test_a_request_no_slot_frees_for_is_refused_at_its_deadline(door: Door) -> None:
    # Nothing ends: the scrape shows the engine busy with other clients' work.
    door.tracker.set_queue_depth(ENDPOINT, 10.0)
    held = Stream(door, {"x-gearbox-tenant": "acme"})
    assert await held_or_routed(door, held)
    await eventually(lambda: held.answered, timeout_s=10.0, what="the refusal")
    assert held.first is not None
    status, error, headers = error_of(held.first.result())
    assert (status, error["error"]["code"]) == (429, "router_overloaded")
    assert "budget no longer allows a wait" in error["error"]["message"]
    assert headers["x-llm-d-request-dropped-reason"] == "router_overloaded"
    assert headers["x-should-retry"] == "true"
    assert int(headers["retry-after"]) >= 1
    assert len(door.queue) == 0
    labels = {"priority": "standard", "reason": "deadline"}
    assert door.metric("gearbox_flow_refused_total", **labels) == 1.0
    await held.close()


async def test_a_stream_closed_while_held_leaves_the_queue_at_once(door: Door) -> None:
    routed = await fill(door)
    gone, kept = Stream(door, {}), Stream(door, {})
    assert await held_or_routed(door, gone)
    assert await held_or_routed(door, kept)
    assert len(door.queue) == 2
    cancelled = door.metric(REQUESTS, route="chat_completions", outcome="cancelled")
    await gone.close()  # Envoy's message timeout, or the client went: the stream is cancelled
    await eventually(lambda: len(door.queue) == 1, what="the closed stream left the queue")
    await eventually(
        lambda: (
            door.metric(REQUESTS, route="chat_completions", outcome="cancelled") == cancelled + 1
        ),
        what="counted as cancelled",
    )
    await routed[0].finish()
    await eventually(lambda: kept.answered, what="the slot went to the one still waiting")
    assert kept.pair() == "llama@fp8"
    assert door.metric("gearbox_flow_dispatched_total", priority="standard") == 1.0
    assert door.metric("gearbox_flow_refused_total", priority="standard", reason="deadline") == 0
    for stream in (*routed, kept):
        await stream.close()


async def answered(streams: Iterable[Stream], count: int) -> None:
    """Once `count` of `streams` are answered."""
    await eventually(lambda: sum(s.answered for s in streams) == count, what=f"{count} answered")


async def test_bands_then_tenant_turns_order_the_dispatch() -> None:
    """Five requests wait on a pair filled to what it sustains (the line, and one request
    of a `spare` tenant past it, `fair_share.lent_past_shares`): four standard ones of two
    tenants and a batch one. Once the pair is empty they are dispatched by band, then
    tenant turn, then deadline, and each tenant to its fair share: two tenants active
    beside the anonymous one refused, each holds at most one of the line's three while the
    others' whole shares are free. The batch request goes once the standard band is empty,
    beside the bulk tenant's last standard one: the batch line of two has room, and shares
    of two thirds reserve no slot (`fair_share`: a fractional share keeps nothing free).
    Answers six times as slow and a 30 s budget: the same concurrencies as a 5 s budget
    (4, and a line of 3), and about 24 s before a waiting request's deadline."""
    async with door_with(FlowSettings(), tpot_per_load_s=0.6) as door:
        await dispatch_in_order(door, {"x-latency-budget-ms": "30000"})


async def dispatch_in_order(door: Door, budget: dict[str, str]) -> None:
    routed = await fill(door, budget)
    spare = Stream(door, {**budget, "x-gearbox-tenant": "spare"})
    assert not await held_or_routed(door, spare)  # within its share: past the line
    routed.append(spare)
    assert len(routed) == 4
    bulk = {**budget, "x-gearbox-tenant": "bulk"}
    waiting = {
        "batch": Stream(door, {**bulk, "x-priority": "batch"}),
        "bulk-1": Stream(door, bulk),
        "bulk-2": Stream(door, bulk),
        "bulk-3": Stream(door, bulk),
        "light": Stream(door, {**budget, "x-gearbox-tenant": "light"}),
    }
    for stream in waiting.values():
        assert await held_or_routed(door, stream)
    groups: list[set[str]] = []
    running = routed  # routed and open: closed together, a group is dispatched
    for size in (2, 1, 2):
        for stream in running:
            await stream.close()
        dispatched = sum(len(g) for g in groups) + size
        await answered(waiting.values(), dispatched)
        group = {n for n, s in waiting.items() if s.answered} - set().union(*groups)
        groups.append(group)
        assert len(door.queue) == len(waiting) - dispatched
        running = [waiting[n] for n in group]
    # Tenant turns: the light tenant's one request goes with the bulk tenant's first, ahead
    # of the bulk tenant's backlog, which goes earliest deadline first, one at a time (its
    # share); strict bands: the batch request once the standard band is empty.
    assert groups == [{"bulk-1", "light"}, {"bulk-2"}, {"bulk-3", "batch"}]
    assert all(s.pair() == "llama@fp8" for s in waiting.values())  # routed, not refused
    for stream in waiting.values():
        await stream.close()


async def test_a_stream_half_closed_while_held_leaves_the_queue(door: Door) -> None:
    """Envoy half-closes the stream when the client goes (it resets it only later): the
    held request leaves the queue then, not at its deadline."""
    routed = await fill(door)
    gone = Stream(door, {})
    assert await held_or_routed(door, gone)
    cancelled = door.metric(REQUESTS, route="chat_completions", outcome="cancelled")
    await gone.call.done_writing()
    await eventually(lambda: len(door.queue) == 0, what="the half-closed stream left the queue")
    await eventually(
        lambda: (
            door.metric(REQUESTS, route="chat_completions", outcome="cancelled") == cancelled + 1
        ),
        what="counted as cancelled",
    )
    assert door.metric("gearbox_flow_refused_total", priority="standard", reason="deadline") == 0
    for stream in (*routed, gone):
        await stream.close()


async def test_one_tenants_backlog_hits_its_bound_not_another_tenants_wait() -> None:
    """A bulk tenant holding as many waiting requests as a tenant may gets 429
    `tenant_limit` at once for the next; a light tenant's requests are routed to its share
    and then wait their turn."""
    slow = {"x-latency-budget-ms": "30000"}  # as in `test_bands_then_tenant_turns_...`
    async with door_with(FlowSettings(queue_per_tenant=2), tpot_per_load_s=0.6) as door:
        routed = await fill(door, {**slow, "x-gearbox-tenant": "bulk"})
        bulk = [Stream(door, {**slow, "x-gearbox-tenant": "bulk"}) for _ in range(3)]
        assert await held_or_routed(door, bulk[0])
        assert await held_or_routed(door, bulk[1])
        assert not await held_or_routed(door, bulk[2])  # answered at once: refused
        assert bulk[2].first is not None
        status, error, headers = error_of(bulk[2].first.result())
        assert (status, headers["x-gearbox-tenant"]) == (429, "bulk")
        assert "its tenant has as many requests waiting as it may" in error["error"]["message"]
        labels = {"priority": "standard", "reason": "tenant_limit"}
        assert door.metric("gearbox_flow_refused_total", **labels) == 1.0
        # The light tenant's first request is routed past the line (its fair share); its
        # second waits its turn, not refused by the bulk tenant's bound.
        light = [Stream(door, {**slow, "x-gearbox-tenant": "light"}) for _ in range(2)]
        assert not await held_or_routed(door, light[0])
        assert light[0].pair() == "llama@fp8"
        assert await held_or_routed(door, light[1])
        assert len(door.queue) == 3
        for stream in (*routed, *bulk, *light):
            await stream.close()


async def test_the_hold_bound_ends_a_wait_the_budget_would_allow() -> None:
    """A 30 s budget allows a wait of about 29 s; `EXTPROC_MAX_HOLD_S` (here 0.2 s) ends it
    long before, so Envoy's message timeout never answers first."""
    async with door_with(FlowSettings(), max_hold_s=0.2) as door:
        door.tracker.set_queue_depth(ENDPOINT, 40.0)  # other clients' work: nothing ends
        held = Stream(door, {"x-latency-budget-ms": "30000"})
        assert await held_or_routed(door, held)
        await eventually(lambda: held.answered, timeout_s=10.0, what="refused at the bound")
        assert held.first is not None
        assert error_of(held.first.result())[0] == 429
        labels = {"priority": "standard", "reason": "deadline"}
        assert door.metric("gearbox_flow_refused_total", **labels) == 1.0
        await held.close()
