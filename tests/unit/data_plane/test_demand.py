"""decision/demand.py: which pair a request spilled from (docs/METRICS.md, "Autoscaling")."""

from __future__ import annotations

import random

from data_plane.decision.choose import choose_route
from data_plane.decision.compile import compile_table
from data_plane.decision.demand import spilled_from
from data_plane.domain import (
    Budget,
    BudgetMode,
    CompiledTable,
    HealthView,
    NoRoute,
    RequestFacts,
    RouteDecision,
    RouteRequest,
)
from tests.unit.data_plane.tables import entry, table
from tests.unit.data_plane.test_routing import _LAT, simple

REQ = RouteRequest(RequestFacts("auto", "chat", 0.5, 400, 100), Budget(latency_s=1.5))


def _spill(t: CompiledTable, req: RouteRequest, health: HealthView) -> tuple[str, str | None]:
    """(the pair chosen or 'none', the pair spilled from or None)."""
    result = choose_route(t, req, health, random.Random(0))
    wanted = spilled_from(t, req, health, result, random.Random(0))
    chosen = result.candidates[0].pair.pair if isinstance(result, RouteDecision) else "none"
    return chosen, None if wanted is None else wanted.pair.pair


def test_no_load_no_spill() -> None:
    assert _spill(simple(), REQ, HealthView()) == ("a@int4", None)


def test_a_loaded_cheap_pair_spills_to_the_next() -> None:
    # ttft 0.1 + 0.1 * 6 and tpot 0.01 + 0.001 * 6 over 100 tokens: 2.3 s > 1.5 s at load 6.
    load = {"a@int4#0": 5.0, "a@int4#1": 5.0}
    assert _spill(simple(), REQ, HealthView(load=load)) == ("a@fp8", "a@int4")


def test_load_after_the_chosen_pair_is_no_spill() -> None:
    assert _spill(simple(), REQ, HealthView(load={"a@fp8#0": 9.0})) == ("a@int4", None)


def test_an_ejected_pair_is_not_a_spill() -> None:
    ejected = frozenset({"a@int4#0", "a@int4#1"})
    health = HealthView(ejected, {"a@int4#0": 5.0, "a@int4#1": 5.0})
    assert _spill(simple(), REQ, health) == ("a@fp8", None)


def test_a_strict_refusal_for_load_spills() -> None:
    t = compile_table(table([entry("a", "int4", **_LAT)]))
    req = RouteRequest(REQ.facts, Budget(latency_s=1.5, mode=BudgetMode.STRICT))
    result = choose_route(t, req, HealthView(load={"a@int4#0": 5.0}), random.Random(0))
    assert isinstance(result, NoRoute)
    assert _spill(t, req, HealthView(load={"a@int4#0": 5.0})) == ("none", "a@int4")


def test_a_floor_no_pair_meets_is_not_a_spill() -> None:
    req = RouteRequest(REQ.facts, Budget(latency_s=1.5, min_accuracy=0.99))
    health = HealthView(load={"a@int4#0": 5.0})
    chosen, wanted = _spill(simple(), req, health)
    assert wanted is None
    assert chosen != "none"  # best effort: the most accurate pair
