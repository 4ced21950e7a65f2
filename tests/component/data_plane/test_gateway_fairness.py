"""Issue 32 through gateway mode's door (docs/gateway.md, "Flow control"): a bulk tenant's
legal traffic does not take a light tenant's share, and a request of a lower band does not
take a slot a higher band's request waits for. Over a real gRPC connection, each stream held
as Envoy holds it. On 8c8a749 gateway mode kept no per-tenant counts (`StepParts.tenant_load`
None) and decided an arrival without looking at its queue's bands: each test here failed."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace

import grpc

from data_plane.client_keys import KeyGrant, key_digest
from data_plane.decision.compile import compile_table
from data_plane.decision_step import default_admission
from data_plane.gateway.router import gateway_router
from data_plane.gateway.service import ExternalProcessor, ServiceConfig, start_server
from data_plane.request.identity import Rights
from data_plane.resilience.endpoint_load import LoadTracker
from data_plane.settings import FlowSettings
from data_plane.table_store import TableStore
from data_plane.telemetry.metrics import DataPlaneMetrics
from tests.component.data_plane.test_gateway_extproc import (
    BUFFERED,
    PAIR_HEADER,
    Gateway,
    error_of,
)
from tests.component.data_plane.test_gateway_flow import (
    ENDPOINT,
    Door,
    Stream,
    door_with,
    held_or_routed,
)
from tests.support.extproc_client import ExternalProcessorStub
from tests.support.waiting import eventually
from tests.unit.data_plane.tables import entry, table

# Answers six times as slow as `test_gateway_flow`'s and a 30 s budget: the same
# concurrencies as its 5 s budget (the pair sustains 4, the standard line is 3), and about
# 24 s before a waiting request's deadline, so none is refused while a test runs.
SLOW = 0.6
BUDGET = {"x-latency-budget-ms": "30000"}
BULK = {**BUDGET, "x-gearbox-tenant": "bulk"}
LIGHT = {**BUDGET, "x-gearbox-tenant": "light"}


async def fill_as(door: Door, headers: dict[str, str]) -> tuple[list[Stream], Stream]:
    """Streams of one tenant routed, kept open, until the pair is full for it; and the
    first one held, kept waiting in the queue."""
    routed: list[Stream] = []
    while len(routed) < 20:
        stream = Stream(door, headers)
        if await held_or_routed(door, stream):
            return routed, stream
        assert stream.pair() == "llama@fp8"
        routed.append(stream)
    raise AssertionError("20 requests routed and the pair still had room")


async def test_a_light_tenant_goes_past_the_line_the_bulk_tenant_holds_past_its_share() -> None:
    """The bulk tenant fills the pair to the standard class's line and its next request
    waits; the light tenant, within its share, is routed at once past the line by what the
    bulk tenant holds past its share, up to what the pair sustains, while the bulk tenant's
    backlog still waits. On 8c8a749 the light tenant's first request waited behind the
    bulk tenant's line."""
    async with door_with(FlowSettings(), tpot_per_load_s=SLOW) as door:
        bulk, backlog = await fill_as(door, BULK)
        line = len(bulk)
        assert len(door.queue) == 1  # the bulk tenant's next request waits
        lights, held = await fill_as(door, LIGHT)
        # Two tenants active: a share is half the line (1.5 of 3). The bulk tenant holds
        # 1.5 past it, so the light tenant's first request goes past the line; its second,
        # past its own share, waits like the bulk tenant's backlog.
        assert (line, len(lights)) == (3, 1)
        assert door.tracker.in_flight(ENDPOINT) == line + 1
        assert not backlog.answered
        assert len(door.queue) == 2  # the bulk backlog and the light tenant's second
        for stream in (*bulk, backlog, *lights, held):
            await stream.close()
        await eventually(lambda: door.tracker.in_flight(ENDPOINT) == 0, what="all ended")


@asynccontextmanager
async def queueless(rights: Rights | None = None) -> AsyncIterator[Gateway]:
    """Gateway mode with the queue off (`FLOW_QUEUE=false`): a request admission would
    hold is refused at once. `rights`: who may claim what (default: gateway mode's)."""
    store, metrics = TableStore(), DataPlaneMetrics("test", "test")
    store.swap(compile_table(table([entry("llama", "fp8", tpot_per_load_s=SLOW)])))
    admission, tracker = default_admission(), LoadTracker()
    admission = replace(admission, rights=rights or Rights(objective_trusted=True))
    router = gateway_router(store, metrics, random.Random(7), PAIR_HEADER, admission, tracker)
    assert router.door.queue is None
    processor = ExternalProcessor(router, metrics, ServiceConfig(BUFFERED, 64 * 1024))
    server, port = await start_server(processor, "127.0.0.1", 0)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield Gateway(ExternalProcessorStub(channel), store, metrics)
    finally:
        await channel.close()
        await server.stop(None)


async def answered(stream: Stream) -> Stream:
    await stream.open()
    assert stream.first is not None
    await stream.first
    return stream


async def test_without_the_queue_the_bulk_tenant_is_refused_past_its_share() -> None:
    """Queue off: the bulk tenant's request past the line is refused at once (429 with
    Retry-After, its tenant named), and so it stays active; the light tenant's first
    request, within its share, is routed past the line; the bulk tenant's next is refused
    again, though the light tenant's second finds the pair as full. On 8c8a749 the light
    tenant's first request was refused."""
    async with queueless() as gateway:
        bulk = [await answered(Stream(gateway, BULK)) for _ in range(4)]
        assert [s.pair() for s in bulk[:3]] == ["llama@fp8"] * 3
        assert bulk[3].first is not None
        status, error, headers = error_of(bulk[3].first.result())
        assert (status, error["error"]["code"]) == (429, "router_overloaded")
        assert headers["x-gearbox-tenant"] == "bulk"
        assert float(headers["retry-after"]) >= 1
        light = await answered(Stream(gateway, LIGHT))
        assert light.pair() == "llama@fp8"
        late = [await answered(Stream(gateway, h)) for h in (BULK, LIGHT)]
        assert [error_of(s.first.result())[0] for s in late if s.first is not None] == [429] * 2
        for stream in (*bulk, light, *late):
            await stream.close()


async def test_a_key_holder_naming_another_tenant_takes_its_own_share_not_that_tenants() -> None:
    """With API keys, a key's tenant wins over the tenant header and llm-d's fairness id in
    gateway mode too (`request.identity`): a key holder naming `victim` fills the line as
    `acme` (its 429 says so), and `victim`'s own request, within its share, is routed past
    the line. Counted as `victim`, the key holder would have put `victim` over its share."""
    rights = Rights(grants={key_digest("k-acme"): KeyGrant(tenant="acme")}, objective_trusted=True)
    posing = {**BUDGET, "authorization": "Bearer k-acme", "x-gearbox-tenant": "victim"}
    fairness_id = {**BUDGET, "authorization": "Bearer k-acme"}
    fairness_id["x-llm-d-inference-fairness-id"] = "victim"
    async with queueless(rights) as gateway:
        acme = [await answered(Stream(gateway, h)) for h in (posing, fairness_id, posing)]
        assert [s.pair() for s in acme] == ["llama@fp8"] * 3
        refused = await answered(Stream(gateway, fairness_id))
        assert refused.first is not None
        status, _, headers = error_of(refused.first.result())
        assert (status, headers["x-gearbox-tenant"]) == (429, "acme")
        victim = await answered(Stream(gateway, {**BUDGET, "x-gearbox-tenant": "victim"}))
        assert victim.pair() == "llama@fp8"
        for stream in (*acme, refused, victim):
            await stream.close()


async def test_a_batch_request_waits_behind_a_standard_one_that_waits_for_its_pair() -> None:
    """Strict bands at arrival, as in the HTTP door (`DecisionStep.decide`'s `behind`): the
    engine's scraped queue leaves no room for a standard request with a 30 s budget, which
    waits; a batch request with a 120 s budget would have room on the same pair, and waits
    behind it instead of taking the slot. It is routed once the standard request is gone.
    On 8c8a749 the batch request was routed at once, ahead of the waiting one."""
    async with door_with(FlowSettings(), tpot_per_load_s=SLOW) as door:
        door.tracker.set_queue_depth(ENDPOINT, 5.0)  # other clients' work at the engine
        standard = Stream(door, BULK)  # one tenant: its fair share is the whole pair
        assert await held_or_routed(door, standard)
        batch = Stream(door, {**BULK, "x-priority": "batch", "x-latency-budget-ms": "120000"})
        assert await held_or_routed(door, batch)
        assert len(door.queue) == 2
        await standard.close()  # the client went: the standard band is empty
        await eventually(lambda: batch.answered, timeout_s=10.0, what="the batch request routed")
        assert batch.pair() == "llama@fp8"
        await batch.close()
