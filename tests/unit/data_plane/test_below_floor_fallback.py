"""Best-effort below the floor ranks by evidence and precision (issue 24, item 2): the bound,
which carries how many items stand behind a number and the family cap, then the more
precise declared format; never the point estimate alone."""

from __future__ import annotations

import random
from typing import Any

from contracts.accuracy_bound import lower_bound
from data_plane.decision.choose import choose_route
from data_plane.decision.compile import compile_table
from data_plane.domain import (
    Budget,
    CompiledTable,
    HealthView,
    RequestFacts,
    RouteDecision,
    RouteReason,
    RouteRequest,
)
from tests.unit.data_plane.tables import entry, table


def _measured(e: dict[str, Any], right: int, n: int, bound: float | None = None) -> dict[str, Any]:
    """`e` measured `right`/`n` on extraction (its 90% bound unless `bound` caps it)."""
    e["accuracy"] = {"extraction": right / n}
    e["accuracy_n"] = {"extraction": n}
    e["accuracy_right"] = {"extraction": right}
    e["accuracy_bound"] = {"extraction": lower_bound(right, n, 0.9) if bound is None else bound}
    e["utility"] = {"extraction": 1.0}
    return e


def _cheap(**kw: Any) -> dict[str, Any]:
    return entry("small", "awq-int4", input_usd_per_mtok=0.1, output_usd_per_mtok=0.2, **kw)


def _dear(**kw: Any) -> dict[str, Any]:
    return entry("big", "bf16", input_usd_per_mtok=1.0, output_usd_per_mtok=2.0, **kw)


def _served(entries: list[dict[str, Any]], floor: float = 0.97) -> RouteDecision:
    t: CompiledTable = compile_table(table(entries))
    facts = RequestFacts("auto", "extraction", 0.5, 400, 100)
    req = RouteRequest(facts, Budget(min_accuracy=floor))  # no pair proves it
    result = choose_route(t, req, HealthView(), random.Random(0))
    assert isinstance(result, RouteDecision), result
    assert result.reason is RouteReason.FLOOR_RELAXED
    return result


def test_equal_bounds_go_to_the_more_precise_format_not_the_faster_cheaper_one() -> None:
    # The case: both measured 95/100; the int4 pair (true 0.90 in the issue) is
    # cheaper and faster, the bf16 pair (true 0.95) more precise. The counts cannot tell
    # them apart; the declared format can.
    d = _served([_measured(_cheap(), 95, 100), _measured(_dear(tpot_base_s=0.05), 95, 100)])
    assert [c.pair.pair for c in d.candidates] == ["big@bf16", "small@awq-int4"]


def test_the_higher_bound_wins_over_a_higher_point_estimate() -> None:
    # 96/100 on the int4 pair, capped by its family's reference (90/100): its bound is the
    # reference's; 95/100 uncapped on the other family has the higher bound.
    reference = _measured(entry("small", "bf16", input_usd_per_mtok=0.5), 90, 100)
    capped = _measured(_cheap(precision_rank=1), 96, 100, bound=lower_bound(90, 100, 0.9))
    d = _served([capped, reference, _measured(_dear(), 95, 100)])
    assert d.candidates[0].pair.pair == "big@bf16"
    assert d.candidates[0].pair.accuracy["extraction"] < capped["accuracy"]["extraction"]


def test_more_items_behind_the_same_estimate_win_under_it() -> None:
    # 0.93: neither bound (0.909, 0.921) proves it; 190/200 makes >= 0.93 likelier
    d = _served([_measured(_cheap(), 95, 100), _measured(_dear(), 190, 200)], floor=0.93)
    assert d.candidates[0].pair.pair == "big@bf16"
