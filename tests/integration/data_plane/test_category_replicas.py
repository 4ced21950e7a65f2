"""Two data-plane replicas fed one published table classify and route every prompt alike."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from contracts.routing_table import RoutingTable, stamp_table
from control_plane.build.category_training import (
    BUILTIN_SOURCE,
    Source,
    builtin_prompts,
    train_category_model,
)
from simulator import Fleet
from tests.integration.data_plane.conftest import MakePlane, Plane, fleet_table
from tests.support.team_prompts import LEGAL_HELD_OUT, TEAM_CATEGORIES, legal_prompts
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

PROMPTS = (
    *LEGAL_HELD_OUT,
    "Compare these two options and tell me which is better.",
    "Say hi.",
    "def add(a, b): return a - b  # why is the sum wrong?",
    "Extract the invoice number and the total as JSON.",
    "What is the derivative of x^3 + 2x?",
    "Is it ethical to break a promise to prevent harm? Argue both sides.",
    "résumé: 日本語のテキスト ☃",
    "",
)


def team_table(fleet: Fleet) -> RoutingTable:
    sources = [Source(BUILTIN_SOURCE, builtin_prompts()), Source("profiles", legal_prompts())]
    data: dict[str, Any] = fleet_table(fleet).model_dump(mode="json")
    data["categories"] = list(TEAM_CATEGORIES)
    data["policy"]["categories"] = {c: {} for c in TEAM_CATEGORIES}
    data["classifier"] = train_category_model(sources, TEAM_CATEGORIES).model_dump(mode="json")
    return stamp_table(data)


async def decision(plane: Plane, text: str) -> dict[str, Any]:
    body = {"model": "auto", "messages": [{"role": "user", "content": text}], "max_tokens": 4}
    resp = await plane.client.post("/v1/route", data=json.dumps(body))
    assert resp.status == 200
    doc = await resp.json()
    return {k: doc[k] for k in ("pair", "category", "complexity", "classification", "budget")}


async def test_two_replicas_decide_alike_with_the_tables_classifier(
    make_plane: MakePlane, fleet: Fleet, tmp_path: Path
) -> None:
    a = await make_plane()
    b = await make_plane(snapshot_path=tmp_path / "b" / "table.json", instance_id="it-dp-b")
    table = team_table(fleet)
    version = await a.publisher.publish(table)
    await eventually(lambda: a.version == version and b.version == version, what="both loaded")
    decisions = [(await decision(a, t), await decision(b, t)) for t in PROMPTS]
    for on_a, on_b in decisions:
        assert on_a == on_b
    assert table.classifier is not None
    for on_a, _ in decisions:
        assert on_a["classification"]["model_sha256"] == table.classifier.model_sha256
    assert [d["category"] for d, _ in decisions[: len(LEGAL_HELD_OUT)]] == ["legal"] * 2
