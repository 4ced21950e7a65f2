"""The live state a data plane writes to Redis carries its per-pair counters (requests, budget
attainment, errors, retries, cost and baseline cost, observed vs predicted latency), counted
in process as answers are delivered (docs/operator_page.md, "What the page shows")."""

from __future__ import annotations

import json

import pytest
import redis.asyncio as aioredis

from contracts.live_state import DataPlaneState
from simulator import FaultConfig, Fleet
from tests.integration.data_plane.conftest import INT4, MakePlane, fleet_table
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

BODY = json.dumps(
    {"model": "auto", "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4}
)


async def test_live_state_carries_per_pair_counters(
    make_plane: MakePlane, fleet: Fleet, redis_client: aioredis.Redis
) -> None:
    plane = await make_plane(breaker_consecutive_failures=100)
    published = await plane.publisher.publish(fleet_table(fleet))
    await eventually(lambda: plane.version == published)
    for _ in range(2):  # cheap int4 answers, one with a generous budget
        resp = await plane.client.post(
            "/v1/chat/completions", data=BODY, headers={"X-Latency-Budget-Ms": "30000"}
        )
        assert (resp.status, resp.headers["X-Route-Pair"]) == (200, "fam@int4")
    fleet.set_faults(INT4, FaultConfig(error_rate=1.0, error_status=503))
    resp = await plane.client.post("/v1/chat/completions", data=BODY)  # int4 fails, fp16 answers
    assert (resp.status, resp.headers["X-Route-Pair"]) == (200, "fam@fp16")
    key = plane.keys.data_plane_state("it-dp")

    async def read() -> DataPlaneState | None:
        raw = await redis_client.get(key)
        return None if raw is None else DataPlaneState.model_validate_json(raw)

    async def counted() -> bool:
        state = await read()
        return state is not None and state.pairs.get("fam@fp16") is not None

    await eventually(counted, what="live state with counters")
    state = await read()
    assert state is not None
    int4, fp16 = state.pairs["fam@int4"], state.pairs["fam@fp16"]
    assert (int4.family, int4.requests, int4.budget_met, int4.budget_missed) == ("fam", 2, 2, 0)
    assert (int4.errors, int4.retries) == (1, 0)  # the failed attempt
    assert (fp16.requests, fp16.errors, fp16.retries) == (1, 0, 1)  # the retry that answered
    # int4 is cheaper than its family's baseline (fp16), which costs exactly itself.
    assert 0 < int4.cost_usd < int4.baseline_cost_usd
    assert fp16.cost_usd == pytest.approx(fp16.baseline_cost_usd)
    assert fp16.cost_usd > 0
    assert int4.latency_n == 2
    assert (int4.latency_sum_s > 0, int4.predicted_sum_s > 0) == (True, True)
    assert sum(int4.ratio_counts.values()) == 2
