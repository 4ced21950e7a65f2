"""`--traffic` and `--item-budget` (profiler/evals/traffic.py, docs/profiler.md): undecided
categories ranked by the traffic deciding them would move, and an item budget spent in that
order."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from contracts.latency_feedback import MixCell
from contracts.profile_report import Prices
from profiler.errors import InputError
from profiler.evals.accuracy import EvalItem, EvalResult
from profiler.evals.decisions import MAX_LOOKS, DecisionTarget
from profiler.evals.traffic import Traffic, category_order, load_traffic
from profiler.run.sequential import ask_until_decided
from tests.unit.profiler.fakes import FakeClient

PRICES = Prices(input_usd_per_mtok=0.05, output_usd_per_mtok=0.2)
TARGET = DecisionTarget(floors=(0.8,))


def _cell(category: str, requests: int, cost_usd: float, floor: float = 0.8) -> MixCell:
    return MixCell(
        category=category, floor=floor, pair="big@fp8", requests=requests, proven=requests,
        input_tokens=500 * requests, output_tokens=200 * requests, cost_usd=cost_usd,
    )  # fmt: skip


# Math traffic costs ten times what chat's does on a dear pair; this pair would serve both
# for 0.000065 $ a request.
TRAFFIC = Traffic((_cell("chat", 100, 0.01), _cell("math", 100, 0.1)), 3600.0)


def test_categories_whose_deciding_moves_more_dollars_come_first() -> None:
    # Both at 83/100: undecided against 0.80 (bound 0.78, upper 0.88).
    counts = {"chat": (83, 100), "math": (83, 100), "code": (99, 100)}
    order = category_order("me@int8", counts, PRICES, TRAFFIC, TARGET)
    assert order == ["math", "chat", "code"]  # code is decided: last
    without = Traffic((_cell("chat", 100, 0.01),), 3600.0)
    assert category_order("me@int8", counts, PRICES, without, TARGET)[0] == "chat"


def _items(category: str, n: int) -> list[EvalItem]:
    return [
        EvalItem(id=f"{category}-{i}", prompt=f"{category} {i}", expected="yes",
                 category=category, scorer="contains")
        for i in range(n)
    ]  # fmt: skip


def _answer(rate: float) -> Callable[[EvalItem], str]:
    def answer(item: EvalItem) -> str:
        index = int(str(item.id).rsplit("-", 1)[1])
        return " yes" if (index * 7919) % 100 < rate * 100 else " no"

    return answer


async def test_an_item_budget_goes_to_the_category_that_moves_traffic() -> None:
    """Both categories near the floor; 60 items to spend: all to math, which moves more."""
    items = _items("chat", 1000) + _items("math", 1000)
    results: list[EvalResult] = []
    planned = DecisionTarget(floors=(0.8,), looks=MAX_LOOKS)  # as profiling.py orders

    def order(counts: Mapping[str, tuple[int, int]]) -> list[str]:
        return category_order("me@int8", counts, PRICES, TRAFFIC, planned)

    client = FakeClient(answer=_answer(0.86))
    await ask_until_decided(client, items, TARGET, 100, 8, results, lambda n: None, 60, order)
    asked = {c: sum(r.category == c for r in results) for c in ("chat", "math")}
    assert asked == {"chat": 100, "math": 160}


async def test_without_a_budget_every_undecided_category_gets_items() -> None:
    items = _items("chat", 1000) + _items("math", 1000)
    results: list[EvalResult] = []
    client = FakeClient(answer=_answer(0.86))
    await ask_until_decided(client, items, TARGET, 100, 8, results, lambda n: None)
    asked = {c: sum(r.category == c for r in results) for c in ("chat", "math")}
    assert asked["chat"] > 100
    assert asked["math"] > 100


def test_traffic_file_is_the_evidence_body(tmp_path: Path) -> None:
    good = tmp_path / "evidence.json"
    body = {"window_s": 3600.0, "mix": [c.model_dump(mode="json") for c in TRAFFIC.mix]}
    good.write_text(json.dumps({**body, "rows": []}))
    assert load_traffic(good) == TRAFFIC
    bad = tmp_path / "bad.json"
    for text, says in (
        ("{", "not JSON"),
        ("[]", "GET /v1/evidence"),
        (json.dumps({**body, "window_s": 0}), "window_s"),
        (json.dumps({**body, "mix": [{"category": "chat"}]}), "mix"),
    ):
        bad.write_text(text)
        with pytest.raises(InputError, match=says):
            load_traffic(bad)
