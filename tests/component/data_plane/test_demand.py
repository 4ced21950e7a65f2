"""The autoscaling signal (docs/METRICS.md, "Autoscaling"): when the cheap pair saturates and
requests spill to the precise one, the cheap pair's demand and desired replicas rise above
what it is sent; when the spilled requests' time has passed they fall back."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from data_plane.upstream.port import UpstreamRequest
from tests.component.data_plane.conftest import CHAT_BODY, Harness, MakeHarness
from tests.component.data_plane.fakes import FakeResponse, chat_json, make_table, pair_entry

CHEAP, PRECISE = "fam@int4", "fam@fp16"
CHEAP_URL, PRECISE_URL = "http://10.255.0.4:9", "http://10.255.0.16:9"
BUDGET = {"X-Latency-Budget-Ms": "50000"}


def _table() -> Any:
    """int4: cheap, 20 s more per unit of load, one replica sustains 2; fp16: flat, 4x price.
    With a 50 s budget int4 is feasible at load 1 and 2 (20 s, 40 s), not at 3 (60 s)."""
    cheap = pair_entry("fam", "int4", urls=[CHEAP_URL], precision_rank=1, ttft_base_s=0.05)
    cheap["latency"] |= {"ttft_per_load_s": 20.0, "ttft_base_s": 0.0, "max_profiled_load": 2}
    precise = pair_entry("fam", "fp16", urls=[PRECISE_URL], accuracy=0.9, usd_per_mtok=4.0)
    return make_table([precise, cheap])


class HoldCheap:
    """Answers fp16 at once; holds every int4 request until released."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self._arrived = asyncio.Event()
        self.held = 0

    async def __call__(self, request: UpstreamRequest) -> FakeResponse:
        if request.url.startswith(CHEAP_URL):
            self.held += 1
            self._arrived.set()
            await self.release.wait()
        return FakeResponse(body=chat_json())

    async def holding(self, count: int) -> None:
        async with asyncio.timeout(10):
            while self.held < count:
                self._arrived.clear()
                await self._arrived.wait()


def gauges(h: Harness, pair: str) -> tuple[float, float, float]:
    return (
        h.metric("gearbox_pair_demand_concurrency", pair=pair),
        h.metric("gearbox_pair_desired_replicas", pair=pair),
        h.metric("gearbox_pair_spilled_total", pair=pair),
    )


async def _post(h: Harness) -> Any:
    return await h.client.post("/v1/chat/completions", data=json.dumps(CHAT_BODY), headers=BUDGET)


async def test_demand_rises_when_the_cheap_pair_saturates_and_spills(
    make_harness: MakeHarness,
) -> None:
    hold = HoldCheap()
    h = await make_harness(_table(), hold)
    assert h.metric("gearbox_pair_sustainable_concurrency", pair=CHEAP) == 2.0
    assert gauges(h, CHEAP) == (0.0, 0.0, 0.0)

    # Two requests fit on int4 (load 1 and 2): in flight there, nothing spilled.
    held = [asyncio.create_task(_post(h)) for _ in range(2)]
    await hold.holding(2)
    assert gauges(h, CHEAP) == (2.0, 1.0, 0.0)

    # int4 is saturated: the next three go to fp16, but each is demand for int4.
    for _ in range(3):
        resp = await _post(h)
        assert resp.status == 200
        assert resp.headers["X-Route-Pair"] == PRECISE
    assert gauges(h, CHEAP) == (5.0, 3.0, 3.0)
    assert h.metric("gearbox_pair_utilisation_ratio", pair=CHEAP) == 2.5
    assert h.metric("gearbox_pair_spilled_total", pair=PRECISE) == 0.0
    assert h.metric("gearbox_pair_demand_concurrency", pair=PRECISE) == 0.0  # answered

    # A spilled request would have taken ~20 s on idle int4; after that only the two in
    # flight remain.
    h.clock.advance(25.0)
    assert gauges(h, CHEAP) == (2.0, 1.0, 3.0)

    hold.release.set()
    for task in held:
        assert (await task).status == 200
    assert gauges(h, CHEAP)[:2] == (0.0, 0.0)


async def test_no_spill_while_the_cheap_pair_has_room(make_harness: MakeHarness) -> None:
    """Load on the chosen pair alone, or on pairs after it, is no spill."""
    hold = HoldCheap()
    h = await make_harness(_table(), hold)
    task = asyncio.create_task(_post(h))
    await hold.holding(1)
    resp = await h.client.post(
        "/v1/chat/completions",
        data=json.dumps(CHAT_BODY),
        headers={**BUDGET, "X-Min-Accuracy": "0.85"},  # only fp16 meets the floor
    )
    assert resp.headers["X-Route-Pair"] == PRECISE
    assert h.metric("gearbox_pair_spilled_total", pair=CHEAP) == 0.0
    hold.release.set()
    assert (await task).status == 200
