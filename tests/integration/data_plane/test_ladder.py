"""The quality-first objective end to end: simulated engines, a published table, a load that
rises and falls; the chosen pairs step down the precision ladder and back up
(docs/data_plane.md "Objectives")."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator

import pytest

from contracts.routing_table import RoutingTable
from simulator import Fleet, SimFleetConfig, SimPairConfig, run_fleet
from tests.component.data_plane.fakes import make_table, pair_entry
from tests.integration.data_plane.conftest import MakePlane, Plane
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

# quantization: (TPOT slope per unit of load in the table, $/Mtok). With 10 output tokens and
# a 1 s budget, latency = 0.05 + 10 x slope x load fits up to load 3 (fp16), 5 (fp8),
# 10 (int8) and 47 (int4): the precise pairs fill up first, then traffic steps down.
RUNGS = {
    "fp16": (0.03, 4.0),
    "fp8": (0.016, 2.0),
    "int8-w8a8": (0.009, 1.5),
    "awq-int4": (0.002, 1.0),
}
LADDER = list(RUNGS)
BUDGET_MS = 1000


@pytest.fixture
async def ladder_fleet() -> AsyncIterator[Fleet]:
    pairs = [
        SimPairConfig(
            name=f"sim-{q}",
            family="fam",
            quantization=q,
            ttft_base_s=0.002,
            tpot_base_s=0.003,
            max_running=64,
        )
        for q in RUNGS
    ]
    async with run_fleet(SimFleetConfig(pairs=pairs), answers={}) as running:
        yield running


def ladder_table(fleet: Fleet) -> RoutingTable:
    entries = []
    for q, (slope, price) in RUNGS.items():
        e = pair_entry(
            "fam", q, urls=[fleet.url(f"sim-{q}")], usd_per_mtok=price, served_model_name=f"sim-{q}"
        )
        e["latency"].update(tpot_base_s=0.0, tpot_per_load_s=slope)
        entries.append(e)
    return make_table(entries, policy={"objective": "quality-first"})


async def wave(plane: Plane, workers: int, per_worker: int) -> Counter[str]:
    """`workers` clients, each sending `per_worker` requests one after another: a closed loop
    holding about `workers` requests in flight. Counts the serving pair of each answer."""
    served: Counter[str] = Counter()
    body = json.dumps(
        {"model": "auto", "max_tokens": 10, "messages": [{"role": "user", "content": "Hi."}]}
    )
    headers = {
        "X-Latency-Budget-Ms": str(BUDGET_MS),
        "X-Min-Accuracy": "0.7",
        "X-Task-Category": "chat",  # the ladder is under test here, not the classifier
    }

    async def worker() -> None:
        for _ in range(per_worker):
            resp = await plane.client.post("/v1/chat/completions", data=body, headers=headers)
            assert resp.status == 200, await resp.text()
            assert resp.headers["X-Route-Reason"] == "most_precise_feasible"
            assert float(resp.headers["X-Route-Predicted-Latency-Ms"]) <= BUDGET_MS
            served[resp.headers["X-Route-Pair"].split("@")[1]] += 1
            await resp.read()

    await asyncio.gather(*(worker() for _ in range(workers)))
    return served


def mean_rung(served: Counter[str]) -> float:
    return sum(LADDER.index(q) * n for q, n in served.items()) / sum(served.values())


async def test_quality_first_steps_down_as_load_rises_and_back_up_as_it_falls(
    make_plane: MakePlane, ladder_fleet: Fleet
) -> None:
    # The ladder's choices are under test, not the engines' speed: a deadline of the budget
    # plus 30 s (0.5 s in the other tests) keeps a starved machine from turning a slow
    # answer into a 504 (make test on d235602: one 504 beside the real-engine tests, while a
    # Redis read of the same test timed out).
    plane = await make_plane(scrape_interval_s=0.1, deadline_grace_s=30.0)
    version = await plane.publisher.publish(ladder_table(ladder_fleet))
    await eventually(lambda: plane.version == version, what="table loaded")
    # e.g. 1: all fp16; 6: fp16 36, fp8 36; 14: 36/60/72 (+int8); 24: 38/63/119/68 (+int4)
    low, mid, high, top, again = [await wave(plane, n, 12) for n in (1, 6, 14, 24, 1)]
    assert set(low) == {"fp16"}
    assert mean_rung(low) < mean_rung(mid) < mean_rung(high) < mean_rung(top)
    assert min(mid["fp8"], high["int8-w8a8"], top["awq-int4"]) > 0
    assert set(again) == {"fp16"}  # load gone: back at the top of the ladder
