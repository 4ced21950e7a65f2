"""How much data a decision needs: undecided pairs, the estimate of items to decide them, and
`--until-decided` asking batches until decided or out of items."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from contracts.accuracy_bound import decides, per_look
from profiler.evals.accuracy import EvalItem, EvalResult, summarize_accuracy
from profiler.evals.decisions import MAX_LOOKS, DecisionTarget, render_undecided, undecided_counts
from profiler.run.sequential import ask_until_decided
from tests.unit.profiler.fakes import FakeClient


def test_a_straddling_interval_is_undecided_with_an_estimate() -> None:
    target = DecisionTarget(floors=(0.7, 0.8, 0.9))
    rows = undecided_counts("f@q", "chat", 85, 100, target)
    assert [r.floor for r in rows] == [0.8]  # 0.7 is met, 0.9 is missed: both decided
    more = rows[0].more
    assert more is not None
    assert decides(round(0.85 * (100 + more)), 100 + more, 0.8, 0.9)
    text = render_undecided(rows, target)
    assert "f@q" in text
    assert "85/100 in [0.794, 0.895] vs floor 0.80" in text
    assert f"~{more} more items" in text


def test_few_items_are_undecided_for_every_positive_floor() -> None:
    rows = undecided_counts("f@q", "math", 10, 10, DecisionTarget(floors=(0.0, 0.5)))
    assert [r.floor for r in rows] == [0.5]
    assert rows[0].more == 10  # up to min_eval_items 20


def test_every_pair_decided_says_so() -> None:
    target = DecisionTarget(floors=(0.5,))
    assert undecided_counts("f@q", "chat", 95, 100, target) == []
    assert "every pair is decided" in render_undecided([], target)


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


async def test_until_decided_asks_more_only_where_undecided() -> None:
    items = _items("chat", 1000) + _items("math", 1000)

    def answer(item: EvalItem) -> str:
        if item.category == "math":
            return " yes"  # always right: decided against 0.8 on the first batch
        return str(_answer(0.86)(item))  # near the floor: needs more items

    client = FakeClient(answer=answer)
    results: list[EvalResult] = []
    target = DecisionTarget(floors=(0.8,))
    await ask_until_decided(client, items, target, 100, 8, results, lambda n: None)
    asked = {c: sum(r.category == c for r in results) for c in ("chat", "math")}
    assert asked["math"] == 100
    assert 100 < asked["chat"] <= 1000
    chat = [r for r in results if r.category == "chat"]
    right = sum(r.correct for r in chat)
    assert decides(right, len(chat), 0.8, per_look(0.9, MAX_LOOKS))
    summary = {a.category: a for a in summarize_accuracy(results, looks=MAX_LOOKS)}
    assert summary["chat"].looks == MAX_LOOKS
    assert summary["chat"].right == right
    assert summary["math"].outcomes == "1" * 100


async def test_until_decided_stops_when_items_run_out() -> None:
    items = _items("chat", 150)
    client = FakeClient(answer=_answer(0.8))  # exactly on the floor: never decided
    results: list[EvalResult] = []
    target = DecisionTarget(floors=(0.8,))
    await ask_until_decided(client, items, target, 100, 8, results, lambda n: None)
    assert len(results) == 150
    assert len({r.item for r in results}) == 150


@pytest.mark.parametrize("first", [1, 30])
async def test_until_decided_never_asks_an_item_twice(first: int) -> None:
    items = _items("chat", 400)
    client = FakeClient(answer=_answer(0.83))
    results: list[EvalResult] = []
    await ask_until_decided(client, items, DecisionTarget(), first, 4, results, lambda n: None)
    keys = [r.item for r in results]
    assert len(keys) == len(set(keys))
    assert len(keys) >= min(first, 400)
