"""The proxy keeps the quality-first ladder's state between requests (docs/data_plane.md
"Objectives"): a pair load pushed off comes back only inside the hysteresis margin."""

from __future__ import annotations

import json

from contracts.routing_table import RoutingTable
from data_plane.app import HEALTH
from tests.component.data_plane.conftest import CHAT_BODY, MakeHarness
from tests.component.data_plane.fakes import make_table, ok_json, pair_entry

FP16, FP8 = "http://fp16-a", "http://fp8-a"


def _table() -> RoutingTable:
    # 8 output tokens: latency = 0.05 + 8 x 0.02 x load for fp16, x 0.002 for fp8.
    entries = []
    for quant, url, slope in (("fp16", FP16, 0.02), ("fp8", FP8, 0.002)):
        e = pair_entry("fam", quant, urls=[url], usd_per_mtok=1.0, tpot_base_s=0.0)
        e["latency"]["tpot_per_load_s"] = slope
        entries.append(e)
    return make_table(entries, policy={"objective": "quality-first"})


async def test_the_served_decision_carries_the_ladder_state_to_the_next(
    make_harness: MakeHarness,
) -> None:
    h = await make_harness(_table(), routes={FP16: ok_json("a"), FP8: ok_json("b")})
    tracker = h.app[HEALTH].tracker

    async def served_at(queue: float) -> str:
        tracker.set_queue_depth("fam@fp16#0", queue, own=0)
        resp = await h.client.post(
            "/v1/chat/completions",
            data=json.dumps(CHAT_BODY),
            headers={"X-Latency-Budget-Ms": "1000"},  # fp16 fits up to load 5.9
        )
        assert resp.status == 200
        assert resp.headers["X-Route-Reason"] == "most_precise_feasible"
        return resp.headers["X-Route-Pair"]

    assert await served_at(0) == "fam@fp16"
    assert await served_at(5) == "fam@fp8"  # load 6: 1.01 s > 1 s, pushed off
    assert await served_at(4.5) == "fam@fp8"  # load 5.5: 0.93 s, inside 1 s but not 0.9 s
    assert await served_at(4) == "fam@fp16"  # load 5: 0.85 s <= 0.9 s: back
    assert h.app[HEALTH].view().ladder == frozenset()
