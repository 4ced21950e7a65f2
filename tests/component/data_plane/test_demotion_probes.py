"""Probes of demoted pairs: a pair demoted in a category gets no client traffic there once its
demoted bound misses the floors, so the checker asks it the requests other pairs answered
(docs/accuracy.md "Live checks"). Hostile clients against it: tests/hostile/."""

from __future__ import annotations

import json
from typing import Any

import orjson

from tests.component.data_plane.conftest import Harness, MakeHarness
from tests.component.data_plane.fakes import demoted_table, ok_json
from tests.support.waiting import eventually

FP16, INT4 = "http://fp16-a", "http://int4-a"
MATH = {"X-Task-Category": "math", "X-Min-Accuracy": "0.5"}


def body(content: str = "What is 12 + 7?", **fields: Any) -> str:
    return json.dumps(
        {
            "model": "auto",
            "messages": [{"role": "user", "content": content}],
            "temperature": 0,
            "max_tokens": 16,
            **fields,
        }
    )


def checks(h: Harness, outcome: str, category: str = "math") -> float:
    """Checks of `fam@int4` (probes and ordinary ones) with `outcome`."""
    return h.metric(
        "gearbox_accuracy_checks_total", pair="fam@int4", category=category, outcome=outcome
    )


def sent_to(h: Harness, host: str) -> list[dict[str, Any]]:
    return [orjson.loads(r.body) for r in h.upstream.requests if r.url.startswith(host)]


async def test_a_demoted_pair_is_asked_what_its_reference_answered(
    make_harness: MakeHarness,
) -> None:
    """The reference served a greedy request within the cap: its answer stands, only the
    demoted pair is asked; at most one probe per interval (2 s by default)."""
    h = await make_harness(
        demoted_table(), routes={FP16: ok_json("19"), INT4: ok_json("12 + 7 = 19")}
    )
    for _ in range(3):
        resp = await h.client.post("/v1/chat/completions", data=body(), headers=MATH)
        assert resp.status == 200
        assert resp.headers["X-Route-Pair"] == "fam@fp16"
    await eventually(lambda: checks(h, "agree") == 1, what="one probe, agreeing")
    h.clock.advance(2.0)
    resp = await h.client.post("/v1/chat/completions", data=body(), headers=MATH)
    assert resp.headers["X-Route-Pair"] == "fam@fp16"
    await eventually(lambda: checks(h, "agree") == 2, what="the next interval's probe")
    probes = sent_to(h, INT4)
    assert [(p["model"], p["temperature"], p["n"], p["max_tokens"]) for p in probes] == [
        ("served-fam-int4", 0.0, 1, 16)
    ] * 2
    assert probes[0]["messages"][0]["content"] == "What is 12 + 7?"
    assert len(sent_to(h, FP16)) == 4  # the clients' requests only
    assert h.metric("gearbox_accuracy_check_cost_usd_total", pair="fam@int4") > 0.0


async def test_a_sampled_answer_that_cannot_stand_is_asked_on_both(
    make_harness: MakeHarness,
) -> None:
    """At temperature 1 the reference's served answer measures the client's sampling: the
    reference is asked again greedily, beside the demoted pair."""
    h = await make_harness(
        demoted_table(), routes={FP16: ok_json("19"), INT4: ok_json("I think 20")}
    )
    resp = await h.client.post(
        "/v1/chat/completions", data=body(temperature=1.0, n=3), headers=MATH
    )
    assert resp.status == 200
    await eventually(lambda: checks(h, "disagree") == 1, what="one probe, disagreeing")
    reask = sent_to(h, FP16)[1:]
    assert [(r["temperature"], r["n"]) for r in reask] == [(0.0, 1)]
    assert [(r["temperature"], r["n"]) for r in sent_to(h, INT4)] == [(0.0, 1)]


async def test_no_probe_where_the_request_could_not_go_or_probes_are_off(
    make_harness: MakeHarness,
) -> None:
    h = await make_harness(demoted_table(), routes={FP16: ok_json("19"), INT4: ok_json("19")})
    pinned = body(model="fam@fp16")  # the model field rules the demoted pair out
    assert (await h.client.post("/v1/chat/completions", data=pinned, headers=MATH)).status == 200
    chat = {"X-Task-Category": "chat", "X-Min-Accuracy": "0.7"}  # not demoted there
    resp = await h.client.post("/v1/chat/completions", data=body(), headers=chat)
    assert resp.headers["X-Route-Pair"] == "fam@fp16"
    off = await make_harness(
        demoted_table(), routes={FP16: ok_json("19")}, accuracy_probe_interval_s=0.0
    )
    assert (await off.client.post("/v1/chat/completions", data=body(), headers=MATH)).status == 200
    resp = await h.client.post("/v1/chat/completions", data=body(), headers=MATH)
    assert resp.status == 200
    await eventually(lambda: checks(h, "agree") == 1, what="the one request it could serve")
    assert len(sent_to(h, INT4)) == 1
    assert sent_to(off, INT4) == []
