"""The category through the real app: the table's own classifier, doubt, and the header check."""

from __future__ import annotations

import json
from typing import Any

from contracts.routing_table import RoutingTable, stamp_table, with_version
from control_plane.build.category_training import (
    BUILTIN_SOURCE,
    Source,
    builtin_prompts,
    train_category_model,
)
from tests.component.data_plane.conftest import MakeHarness
from tests.component.data_plane.fakes import ok_json, two_pair_table
from tests.support.team_prompts import LEGAL_HELD_OUT, TEAM_CATEGORIES, legal_prompts

FP16, INT4 = "http://fp16-a", "http://int4-a"
ROUTES = {FP16: ok_json("precise"), INT4: ok_json("cheap")}
# The built-in model: reasoning 0.39, chat 0.35 (below the default confidence 0.6).
UNSURE = "Compare these two options and tell me which is better."
# fam@int4 (accuracy 0.6) meets reasoning's floor, only fam@fp16 (0.9) meets chat's.
FLOORS = {"categories": {"chat": {"min_accuracy": 0.8}, "reasoning": {"min_accuracy": 0.5},
                         "code": {}, "extraction": {}, "math": {}}}  # fmt: skip


def _body(text: str) -> bytes:
    return json.dumps(
        {"model": "auto", "messages": [{"role": "user", "content": text}], "max_tokens": 8}
    ).encode()


def team_table() -> RoutingTable:
    """The two-pair table with a 'legal' category and the classifier trained on it."""
    sources = [Source(BUILTIN_SOURCE, builtin_prompts()), Source("profiles", legal_prompts())]
    data: dict[str, Any] = two_pair_table([FP16], [INT4]).model_dump(mode="json")
    data["categories"] = list(TEAM_CATEGORIES)
    data["policy"]["categories"] = {c: {} for c in TEAM_CATEGORIES}
    data["classifier"] = train_category_model(sources, TEAM_CATEGORIES).model_dump(mode="json")
    return with_version(stamp_table(data), 2)


async def test_abstention_routes_under_the_stricter_floor_and_says_so(
    make_harness: MakeHarness,
) -> None:
    h = await make_harness(two_pair_table([FP16], [INT4], policy=FLOORS), routes=ROUTES)
    resp = await h.client.post("/v1/chat/completions", data=_body(UNSURE))
    assert resp.status == 200
    assert resp.headers["X-Route-Pair"] == "fam@fp16"
    assert resp.headers["X-Route-Reason"] == (
        "cheapest_feasible; category_uncertain: routed as chat (plausible reasoning,chat)"
    )
    assert h.metric("gearbox_category_abstentions_total", routed_as="chat") == 1

    route = await (await h.client.post("/v1/route", data=_body(UNSURE))).json()
    assert (route["pair"], route["category"], route["budget"]["min_accuracy"]) == (
        "fam@fp16",
        "chat",
        0.8,
    )
    c = route["classification"]
    assert (c["abstained"], c["top"], c["plausible"], c["routed_as"]) == (
        True,
        "reasoning",
        ["reasoning", "chat"],
        "chat",
    )
    assert c["builtin"] is True
    assert "the strictest floor among reasoning, chat" in route["summary"]
    assert h.metric("gearbox_category_abstentions_total", routed_as="chat") == 1  # not /route


async def test_a_policy_doubt_category_or_the_header_replaces_the_guess(
    make_harness: MakeHarness,
) -> None:
    policy = {**FLOORS, "doubt_category": "reasoning"}
    h = await make_harness(two_pair_table([FP16], [INT4], policy=policy), routes=ROUTES)
    resp = await h.client.post("/v1/chat/completions", data=_body(UNSURE))
    assert resp.headers["X-Route-Pair"] == "fam@int4"
    assert resp.headers["X-Route-Reason"].endswith("routed as reasoning (plausible reasoning,chat)")
    sure = await h.client.post(
        "/v1/chat/completions", data=_body(UNSURE), headers={"X-Task-Category": "chat"}
    )
    assert (sure.headers["X-Route-Pair"], sure.headers["X-Route-Reason"]) == (
        "fam@fp16",
        "cheapest_feasible",
    )


async def test_an_unknown_task_category_is_a_400_naming_the_header(
    make_harness: MakeHarness,
) -> None:
    h = await make_harness(two_pair_table([FP16], [INT4]), routes=ROUTES)
    for path in ("/v1/chat/completions", "/v1/route"):
        resp = await h.client.post(path, data=_body("hi"), headers={"X-Task-Category": "poetry"})
        assert resp.status == 400
        error = (await resp.json())["error"]
        assert (error["param"], error["code"]) == ("X-Task-Category", "invalid_budget")
        assert "allowed values: chat, code, extraction, math, reasoning" in error["message"]
    assert h.upstream.requests == []


async def test_the_tables_own_classifier_knows_the_teams_categories(
    make_harness: MakeHarness,
) -> None:
    table = team_table()
    assert table.classifier is not None
    h = await make_harness(table, routes=ROUTES)
    for text in LEGAL_HELD_OUT:
        route = await (await h.client.post("/v1/route", data=_body(text))).json()
        assert route["category"] == "legal"
        assert route["classification"]["model_sha256"] == table.classifier.model_sha256
        assert route["classification"]["builtin"] is False
    ok = await h.client.post("/v1/route", data=_body("hi"), headers={"X-Task-Category": "legal"})
    assert ok.status == 200
