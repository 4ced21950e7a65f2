"""Accuracy checks through the proxy: after the answer, on the reference pair, sampled and
capped per hour; the client's answer is the lower-precision pair's, unchanged (the hostile
cases are in tests/hostile/test_accuracy_evidence.py)."""

from __future__ import annotations

import json

from tests.component.data_plane.conftest import CHAT_BODY, MakeHarness
from tests.component.data_plane.fakes import ok_json, two_pair_table
from tests.support.waiting import eventually

FP16, INT4 = "http://fp16-a", "http://int4-a"


async def test_lower_precision_answers_are_re_asked_on_the_reference_pair(
    make_harness: MakeHarness,
) -> None:
    policy = {"accuracy_check": {"sample_rate": 1.0, "max_checks_per_hour": 2}}
    h = await make_harness(
        two_pair_table([FP16], [INT4], policy=policy),
        routes={FP16: ok_json("19"), INT4: ok_json("12 + 7 = 19")},
    )
    greedy = {**CHAT_BODY, "temperature": 0}  # the served answer stands for int4's
    raw = json.dumps({**greedy, "model": "fam@int4"})
    math = {"X-Task-Category": "math"}
    for _ in range(3):
        resp = await h.client.post("/v1/chat/completions", data=raw, headers=math)
        assert resp.status == 200
        assert (await resp.json())["choices"][0]["message"]["content"] == "12 + 7 = 19"
    reference = json.dumps({**greedy, "model": "fam@fp16"})
    assert (await h.client.post("/v1/chat/completions", data=reference, headers=math)).status == 200

    def agreed() -> float:
        return h.metric(
            "gearbox_accuracy_checks_total", pair="fam@int4", category="math", outcome="agree"
        )

    await eventually(lambda: agreed() == 2, what="two re-asks (the hourly cap)")
    to_fp16 = [r for r in h.upstream.requests if r.url.startswith(FP16)]
    assert len(to_fp16) == 3  # two re-asks + the pinned request; the reference is not re-asked
    assert len([r for r in h.upstream.requests if r.url.startswith(INT4)]) == 3  # not re-asked
    assert b'"served-fam-fp16"' in to_fp16[0].body
    assert h.metric("gearbox_accuracy_check_cost_usd_total", pair="fam@int4") > 0.0


async def test_off_by_default(make_harness: MakeHarness) -> None:
    h = await make_harness(two_pair_table([FP16], [INT4]), routes={INT4: ok_json("a")})
    raw = json.dumps({**CHAT_BODY, "model": "fam@int4"})
    assert (await h.client.post("/v1/chat/completions", data=raw)).status == 200
    assert [r.url.startswith(INT4) for r in h.upstream.requests] == [True]
