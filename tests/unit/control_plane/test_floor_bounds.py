"""The bound each table entry routes on: counts, min_eval_items, the precision-monotone cap
with its paired escape, coverage on a synthetic family, and the decision it drives."""

from __future__ import annotations

import random
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.accuracy_bound import lower_bound
from contracts.policy import Policy
from contracts.profile_report import CategoryAccuracy, ProfileReport
from control_plane.build.floor_bounds import floor_bounds, paired_counts
from control_plane.build.table import build_table
from data_plane.decision.choose import choose_route
from data_plane.decision.compile import compile_table
from data_plane.domain import (
    Budget,
    HealthView,
    Rejection,
    RequestFacts,
    RouteDecision,
    RouteRequest,
)
from tests.unit.control_plane.factories import make_report

NOW = datetime(2026, 11, 1, tzinfo=UTC)


def counted(category: str, outcomes: Sequence[bool], ids: Sequence[str] | None = None) -> Any:
    n, right = len(outcomes), sum(outcomes)
    names = ids or [f"{category}-{i}" for i in range(n)]
    return CategoryAccuracy(
        category=category,
        accuracy=right / n,
        n=n,
        ci_low=0.0,
        ci_high=1.0,
        right=right,
        items=tuple(names),
        outcomes="".join("1" if o else "0" for o in outcomes),
    )


def with_accuracy(report: ProfileReport, *accuracy: CategoryAccuracy) -> ProfileReport:
    return report.model_copy(update={"accuracy": accuracy})


def pair_report(quant: str, right: int, n: int, family: str = "fam", **kw: Any) -> ProfileReport:
    outcomes = [True] * right + [False] * (n - right)
    return with_accuracy(make_report(family, quant, **kw), counted("chat", outcomes))


def route(table: Any, floor: float, alias: str = "auto") -> Any:
    facts = RequestFacts(alias, "chat", 0.1, 400, 64)
    req = RouteRequest(facts, Budget(min_accuracy=floor, category="chat"))
    return choose_route(compile_table(table), req, HealthView(), random.Random(1))


def test_twenty_of_twenty_five_is_rejected_at_080_and_accepted_at_060() -> None:
    table = build_table([pair_report("fp16", 20, 25)], Policy(), NOW)
    entry = table.entries[0]
    assert entry.accuracy["chat"] == pytest.approx(0.8)
    assert entry.accuracy_right["chat"] == 20
    assert entry.accuracy_n["chat"] == 25
    assert entry.accuracy_bound["chat"] == pytest.approx(lower_bound(20, 25, 0.9))
    strict = Budget(min_accuracy=0.8, category="chat", mode=None)
    facts = RequestFacts("auto", "chat", 0.1, 400, 64)
    compiled = compile_table(table)
    decision = choose_route(compiled, RouteRequest(facts, strict), HealthView(), random.Random(1))
    assert isinstance(decision, RouteDecision)
    assert decision.reason.value == "best_effort_below_floor"  # the floor was not met
    rejected = [r for r in decision.rejected if r.reason is Rejection.BELOW_FLOOR]
    assert [r.detail for r in rejected] == [
        "below floor 0.80 at 90% confidence on chat: 20/25 = 0.80, lower bound 0.660"
    ]
    accepted = route(table, 0.6)
    assert isinstance(accepted, RouteDecision)
    assert accepted.reason.value == "cheapest_feasible"


def test_confidence_is_the_policys() -> None:
    table = build_table([pair_report("fp16", 20, 25)], Policy(floor_confidence=0.5), NOW)
    assert table.entries[0].accuracy_bound["chat"] == pytest.approx(lower_bound(20, 25, 0.5))
    assert route(table, 0.75).reason.value == "cheapest_feasible"


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 19), data=st.data())
def test_below_min_eval_items_no_positive_floor_is_served(n: int, data: st.DataObject) -> None:
    right = data.draw(st.integers(0, n))
    floor = data.draw(st.floats(1e-6, 1.0))
    table = build_table([pair_report("fp16", right, n)], Policy(min_eval_items=20), NOW)
    assert table.entries[0].accuracy_bound["chat"] == 0.0
    decision = route(table, floor)
    assert decision.reason.value != "cheapest_feasible"
    detail = next(r.detail for r in decision.rejected if r.reason is Rejection.BELOW_FLOOR)
    assert "accuracy unknown" in detail
    assert f"{right}/{n} eval items (fewer than min_eval_items 20)" in detail


def test_a_variant_measured_above_its_reference_is_capped() -> None:
    ref = [True] * 80 + [False] * 20
    var = [False] * 3 + [True] * 77 + [True] * 7 + [False] * 13  # 7 gains, 3 losses: noise
    reference = with_accuracy(make_report("fam", "fp16"), counted("chat", ref))
    variant = with_accuracy(make_report("fam", "awq-int4"), counted("chat", var))
    assert paired_counts(variant.accuracy[0], reference.accuracy[0]) == (7, 3)
    bounds = floor_bounds([reference, variant], Policy())
    assert bounds["fam@awq-int4"]["chat"].bound == bounds["fam@fp16"]["chat"].bound
    assert bounds["fam@awq-int4"]["chat"].accuracy == pytest.approx(0.84)


def test_a_variant_the_paired_test_finds_better_keeps_its_bound() -> None:
    ref = [True] * 70 + [False] * 30
    var = [True] * 70 + [True] * 15 + [False] * 15  # right on 15 items the reference missed
    reference = with_accuracy(make_report("fam", "fp16"), counted("chat", ref))
    variant = with_accuracy(make_report("fam", "fp8"), counted("chat", var))
    assert paired_counts(variant.accuracy[0], reference.accuracy[0]) == (15, 0)
    bounds = floor_bounds([reference, variant], Policy())
    assert bounds["fam@fp8"]["chat"].bound == pytest.approx(lower_bound(85, 100, 0.9))


def test_without_item_outcomes_the_cap_holds() -> None:
    reference = make_report("fam", "fp16", accuracy={"chat": 0.7})
    variant = make_report("fam", "fp8", accuracy={"chat": 0.9})
    bounds = floor_bounds([reference, variant], Policy())
    assert bounds["fam@fp8"]["chat"].bound == bounds["fam@fp16"]["chat"].bound
    assert bounds["fam@fp16"]["chat"].right == 140  # 0.7 x 200 from an older report


def _family_draw(
    rng: np.random.Generator, n: int, p_ref: float, loss: float, gain: float
) -> tuple[list[bool], list[bool]]:
    ref = rng.random(n) < p_ref
    flip = rng.random(n)
    var = np.where(ref, flip >= loss, flip < gain)
    return ref.tolist(), var.tolist()


@pytest.mark.parametrize(
    ("p_ref", "loss", "gain"),
    [(0.85, 0.03, 0.0), (0.82, 0.0, 0.0), (0.8, 0.02, 0.1), (0.9, 0.1, 0.02)],
)
def test_family_bounds_are_never_over_confident(p_ref: float, loss: float, gain: float) -> None:
    """A reference and a quantized variant answer the same simulated eval sets (the variant
    flips `loss` of the reference's right answers and `gain` of its wrong ones); over many
    sets the variant's true accuracy is below its table bound at most 10% of the time."""
    rng = np.random.default_rng(7)
    p_var = p_ref * (1 - loss) + (1 - p_ref) * gain
    policy = Policy()
    base_ref, base_var = make_report("fam", "fp16"), make_report("fam", "int8")
    draws, misses = 1500, 0
    for _ in range(draws):
        ref, var = _family_draw(rng, 100, p_ref, loss, gain)
        reports = [
            with_accuracy(base_ref, counted("chat", ref)),
            with_accuracy(base_var, counted("chat", var)),
        ]
        misses += floor_bounds(reports, policy)["fam@int8"]["chat"].bound > p_var
    assert misses / draws <= 0.1 + 3 * (0.09 / draws) ** 0.5


def test_fleet_baseline_is_the_best_familys_most_precise_pair() -> None:
    reports = [
        make_report("small", "fp16", accuracy={"chat": 0.7}),
        make_report("small", "awq-int4", accuracy={"chat": 0.99}),
        make_report("large", "fp8", accuracy={"chat": 0.9}),
        make_report("large", "bf16", accuracy={"chat": 0.85}),
    ]
    table = build_table(reports, Policy(), NOW, prune=False)
    assert table.baselines == {"large": "large@bf16", "small": "small@fp16"}
    # large's reference (bf16, 0.85) beats small's (fp16, 0.70); int4's 0.99 has no say.
    assert table.fleet_baseline == "large@bf16"
    ranks = {e.pair: e.precision_rank for e in table.entries}
    assert ranks["small@fp16"] == 0
    assert ranks["small@awq-int4"] == 1
    assert ranks["large@bf16"] == 0
    assert ranks["large@fp8"] == 1
    formats = {e.pair: e.precision_format for e in table.entries}
    assert formats["small@awq-int4"] == "int4"


def test_planned_looks_split_the_confidence() -> None:
    base = pair_report("fp16", 90, 100)
    looked = base.accuracy[0].model_copy(update={"looks": 4})
    bounds = floor_bounds([with_accuracy(base, looked)], Policy())
    assert bounds["fam@fp16"]["chat"].bound == pytest.approx(lower_bound(90, 100, 0.975))
