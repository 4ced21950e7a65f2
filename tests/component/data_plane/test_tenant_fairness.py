"""Issue 32, finding 2 (docs/data_plane.md, "Flow control"): a light tenant beside a bulk
tenant on one pair is not the one refused. On 95376ca the class rule (tenant-blind) refused
whoever arrived at a full pair, and the fair share protected only tenants with requests in
flight, so the bulk tenant's closed loops refilled every slot that freed: the light tenant,
started together with it, got 0 served and every request refused."""

from __future__ import annotations

import asyncio
import json

from contracts.routing_table import RoutingTable
from tests.component.data_plane.conftest import CHAT_BODY, Harness, MakeHarness
from tests.component.data_plane.fakes import FakeResponse, chat_json, make_table, pair_entry
from tests.support.waiting import eventually

URL = "http://fp16-a"
BODY = json.dumps(CHAT_BODY).encode()
HOLD_S = 0.2  # each answer takes this long at the engine
RUN_S = 5.0


def pair_of_six() -> RoutingTable:
    """One pair predicted at about a second, profiled up to 6 at once: it sustains 6, of
    which the default (standard) class may fill 4."""
    entry = pair_entry("fam", "fp16", urls=[URL], ttft_base_s=1.0)
    entry["latency"]["max_profiled_load"] = 6
    return make_table([entry])


async def closed_loop(h: Harness, tenant: str, until: float, tally: dict[str, int]) -> None:
    """One client, one request at a time; after a 429 it waits the Retry-After it was told."""
    loop = asyncio.get_running_loop()
    headers = {"x-gearbox-tenant": tenant}
    while loop.time() < until:
        resp = await h.client.post("/v1/chat/completions", data=BODY, headers=headers)
        await resp.read()
        if resp.status == 200:
            tally["served"] += 1
            continue
        assert resp.status == 429, resp.status
        tally["refused"] += 1
        await asyncio.sleep(min(float(resp.headers["Retry-After"]), until - loop.time()))


async def run(h: Harness, loops: dict[str, int]) -> dict[str, dict[str, int]]:
    until = asyncio.get_running_loop().time() + RUN_S
    tallies = {t: {"served": 0, "refused": 0} for t in loops}
    await asyncio.gather(
        *(closed_loop(h, t, until, tallies[t]) for t, n in loops.items() for _ in range(n))
    )
    return tallies


async def test_a_light_tenant_beside_a_bulk_tenant_is_served_about_as_well_as_alone(
    make_harness: MakeHarness,
) -> None:
    """With the queue (the HTTP door's default), the bulk tenant's backlog waits and the
    light tenant's requests are dispatched in turn with it: neither is refused."""
    hold = {URL: lambda r: FakeResponse(body=chat_json(), delays_s={0: HOLD_S})}
    h = await make_harness(pair_of_six(), routes=hold, engine_deadline_factor=0)
    alone = (await run(h, {"light": 2}))["light"]
    assert alone["refused"] == 0
    beside = await run(h, {"bulk": 12, "light": 2})
    assert beside["light"]["refused"] == 0, beside
    # Each light loop is served as its own slot allows, several times as often as a bulk
    # loop (12 share the rest); measured 47 served beside against 49-50 alone. The machine's
    # load moves both runs, so the bound against the solo run is loose.
    per_light, per_bulk = beside["light"]["served"] / 2, beside["bulk"]["served"] / 12
    assert per_light >= 2 * per_bulk, beside
    assert beside["light"]["served"] >= 0.6 * alone["served"], (alone, beside)
    assert beside["bulk"]["served"] > 0, beside  # work-conserving: it keeps its share
    assert h.metric("gearbox_flow_queued_total", tenant="bulk", priority="standard") > 0


async def test_without_the_queue_the_bulk_tenant_is_the_one_refused(
    make_harness: MakeHarness,
) -> None:
    """With the queue off (`FLOW_QUEUE=false`) the fair share alone protects the light
    tenant: refused lately, it counts as active, and the bulk tenant is held to its share."""
    hold = {URL: lambda r: FakeResponse(body=chat_json(), delays_s={0: HOLD_S})}
    h = await make_harness(pair_of_six(), routes=hold, engine_deadline_factor=0, flow_queue=False)
    alone = (await run(h, {"light": 2}))["light"]
    assert alone["refused"] == 0
    beside = await run(h, {"bulk": 12, "light": 2})
    # At most its first request per loop may find the pair full before the bulk tenant is
    # held to its share (2 of the 4): a tenant refused lately counts as active.
    assert beside["light"]["refused"] <= 2, beside
    assert beside["light"]["served"] >= 0.6 * alone["served"], (alone, beside)
    assert beside["bulk"]["refused"] > beside["light"]["refused"], beside
    assert beside["bulk"]["served"] > 0, beside  # work-conserving: it keeps its share


async def test_a_tenant_within_its_share_goes_past_the_line_another_holds_past_its_share(
    make_harness: MakeHarness,
) -> None:
    """The bench's light tenant lost budget here (issue 32, 89.4% against 100% alone): the
    bulk tenant held the class's line (4 of the 6 the pair sustains) past its share, taken
    before the light tenant was active or while the capacity was larger, and the light
    tenant's requests waited in the queue for that excess to drain. Now a tenant within its
    share may fill the pair past the line by what the others hold past theirs, up to what
    the pair sustains; the bulk tenant's backlog still waits. On cfcc038 the light tenant's
    first request waits in the queue."""
    release = asyncio.Event()
    gated = {URL: lambda r: FakeResponse(body=chat_json(), gate=release)}
    h = await make_harness(pair_of_six(), routes=gated, engine_deadline_factor=0)
    bulk, light = {"x-gearbox-tenant": "bulk"}, {"x-gearbox-tenant": "light"}
    held = [asyncio.create_task(ask(h, bulk)) for _ in range(4)]
    await eventually(lambda: len(h.upstream.requests) == 4, what="bulk holds the line")
    backlog = asyncio.create_task(ask(h, bulk))
    await eventually(
        lambda: h.metric("gearbox_flow_queue_length", priority="standard") == 1,
        what="the bulk tenant's fifth waits",
    )
    lights = [asyncio.create_task(ask(h, light)) for _ in range(2)]

    def light_placed() -> bool:
        queued = h.metric("gearbox_flow_queued_total", tenant="light", priority="standard")
        return len(h.upstream.requests) == 6 or queued > 0

    await eventually(light_placed, what="the light tenant's requests sent or queued")
    assert h.metric("gearbox_flow_queued_total", tenant="light", priority="standard") == 0
    assert len(h.upstream.requests) == 6  # past the line (4), not past what it sustains (6)
    assert h.metric("gearbox_flow_queue_length", priority="standard") == 1  # bulk's fifth
    release.set()
    assert await asyncio.gather(*held, backlog, *lights) == [200] * 7


async def ask(h: Harness, headers: dict[str, str]) -> int:
    resp = await h.client.post("/v1/chat/completions", data=BODY, headers=headers)
    await resp.read()
    return resp.status
