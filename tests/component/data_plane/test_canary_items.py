"""Canary items on the data plane (docs/accuracy.md "Canary items"): held-out items with known
answers sent to each pair through the attempt path, at the configured rate and within the
dollar budget per pair, scored by the category's scorer and counted in the feedback summaries,
never as client traffic."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from data_plane.app import CANARY, FEEDBACK, STORE
from data_plane.serving.canary_items import parse_items
from tests.component.data_plane import conftest as component
from tests.component.data_plane.conftest import Harness, MakeHarness
from tests.component.data_plane.fakes import ok_json, two_pair_table
from tests.support.waiting import eventually

make_harness = component.make_harness
FP16, INT4 = "http://fp16-a", "http://int4-a"
ITEM = {"prompt": "2 - 31 =", "expected": -29, "scorer": "numeric", "category": "math"}


def _items(tmp_path: Path) -> Path:
    path = tmp_path / "canary.jsonl"
    lines = [json.dumps({**ITEM, "max_tokens": 8}), json.dumps({"messages": [], "x": 1})]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


async def _harness(make_harness: MakeHarness, tmp_path: Path, usd_per_hour: float) -> Harness:
    return await make_harness(
        two_pair_table([FP16], [INT4]),
        routes={FP16: ok_json("The answer is -29."), INT4: ok_json("-31")},
        feedback_canary_items_per_minute=30.0,  # one item per pair every 2 s
        feedback_canary_usd_per_hour=usd_per_hour,
        feedback_canary_items_file=str(_items(tmp_path)),
    )


def _items_metric(h: Harness, pair: str, outcome: str) -> float:
    return h.metric("gearbox_canary_items_total", pair=pair, category="math", outcome=outcome)


async def test_each_pair_gets_canaries_scored_and_reported(
    make_harness: MakeHarness, tmp_path: Path
) -> None:
    h = await _harness(make_harness, tmp_path, usd_per_hour=1.0)
    table = h.app[STORE].current
    assert table is not None
    assert await h.app[CANARY].send_due(table) == 2
    sent = [orjson.loads(r.body) for r in h.upstream.requests]
    assert [r.url.split("/v1/")[1] for r in h.upstream.requests] == ["completions"] * 2
    assert {(b["model"], b["prompt"], b["temperature"], b["max_tokens"]) for b in sent} == {
        ("served-fam-fp16", "2 - 31 =", 0.0, 8),
        ("served-fam-int4", "2 - 31 =", 0.0, 8),
    }
    assert _items_metric(h, "fam@fp16", "right") == 1
    assert _items_metric(h, "fam@int4", "wrong") == 1
    assert h.metric("gearbox_canary_cost_usd_total", pair="fam@fp16") > 0.0
    assert await h.app[CANARY].send_due(table) == 0  # the rate: next slot in 2 s
    h.clock.advance(2.0)
    assert await h.app[CANARY].send_due(table) == 2
    (report,) = h.app[FEEDBACK].drain("dp", now=1.0)
    assert report.table_version == table.version
    assert [(c.pair, c.category, c.n, c.right) for c in report.canary] == [
        ("fam@fp16", "math", 2, 2),
        ("fam@int4", "math", 2, 0),
    ]
    assert report.cells == ()  # no latency feedback: not client traffic
    assert report.mix == ()


async def test_canaries_stay_within_the_dollar_budget_per_pair(
    make_harness: MakeHarness, tmp_path: Path
) -> None:
    h = await _harness(make_harness, tmp_path, usd_per_hour=0.0)
    table = h.app[STORE].current
    assert table is not None
    assert await h.app[CANARY].send_due(table) == 0
    assert h.upstream.requests == []
    assert _items_metric(h, "fam@fp16", "over_budget") == 1


async def test_a_disagreement_raises_the_pairs_canary_rate_and_decides_nothing(
    make_harness: MakeHarness, tmp_path: Path
) -> None:
    """Agreement re-asks only ask for more evidence: int4's answer disagrees with fp16's, so
    int4 gets one canary item before its next slot; fp16 does not."""
    h = await make_harness(
        two_pair_table([FP16], [INT4], policy={"accuracy_check": {"sample_rate": 1.0}}),
        routes={FP16: ok_json("12"), INT4: ok_json("13")},
        feedback_canary_items_per_minute=30.0,
        feedback_canary_items_file=str(_items(tmp_path)),
    )
    table = h.app[STORE].current
    assert table is not None
    assert await h.app[CANARY].send_due(table) == 2  # both slots
    body = json.dumps(
        {"model": "fam@int4", "temperature": 0, "max_tokens": 16,
         "messages": [{"role": "user", "content": "What is 5 + 7?"}]}
    )  # fmt: skip
    resp = await h.client.post(
        "/v1/chat/completions", data=body, headers={"X-Task-Category": "math"}
    )
    assert resp.status == 200

    def disagreed() -> bool:
        return (
            h.metric(
                "gearbox_accuracy_checks_total",
                pair="fam@int4",
                category="math",
                outcome="disagree",
            )
            == 1
        )

    await eventually(disagreed, what="the re-ask disagreed")
    before = len(h.upstream.requests)
    assert await h.app[CANARY].send_due(table) == 1  # int4's extra item, before its slot
    assert [r.url.startswith(INT4) for r in h.upstream.requests[before:]] == [True]
    assert await h.app[CANARY].send_due(table) == 0
    assert _items_metric(h, "fam@int4", "wrong") == 2


def test_a_bad_item_line_is_named() -> None:
    with pytest.raises(ValueError, match="line 2"):
        parse_items([json.dumps(ITEM), json.dumps({**ITEM, "scorer": "judge"})])
