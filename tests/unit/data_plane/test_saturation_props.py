"""Issue 32's invariant, over random tables, budgets, max_tokens, margins, learned output
lengths, classes and in-flight states: a request that some pair meets unloaded is never
refused while such a pair has an endpoint with nothing in flight (neither by the class line
nor by a fair share), and never refused while such a pair is below its class line, nor below
its sustainable concurrency while the fleet is not pressed (decision/saturation.py,
decision/admission.py, decision/fair_share.py)."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contracts.policy import PriorityClass
from data_plane.decision.admission import Shed, admit
from data_plane.decision.choose import choose_route
from data_plane.decision.compile import compile_table
from data_plane.decision.fair_share import over_fair_share, surely_within
from data_plane.decision.feasibility import effective_limits
from data_plane.decision.saturation import Fleet, Seen, fleet_of
from data_plane.domain import (
    Budget,
    BudgetMode,
    CompiledTable,
    HealthView,
    RequestFacts,
    RouteDecision,
    RouteReason,
    RouteRequest,
)
from tests.unit.data_plane.tables import CATEGORIES, entry, table

_SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
_FEASIBLE = (RouteReason.CHEAPEST_FEASIBLE, RouteReason.MOST_PRECISE_FEASIBLE)


@st.composite
def _table(draw: st.DrawFn) -> CompiledTable:
    entries: list[dict[str, Any]] = []
    for i in range(draw(st.integers(1, 4))):
        e = entry(
            "f",
            f"q{i}",
            endpoints=draw(st.integers(1, 3)),
            input_usd_per_mtok=draw(st.floats(0.0, 5.0)),
            output_usd_per_mtok=draw(st.floats(0.0, 20.0)),
            ttft_base_s=draw(st.floats(0.0, 1.0)),
            ttft_per_input_token_s=draw(st.floats(0.0, 1e-3)),
            ttft_per_load_s=draw(st.floats(0.0, 0.2)),
            tpot_base_s=draw(st.floats(0.001, 0.05)),
            tpot_per_load_s=draw(st.floats(0.0, 0.01)),
            accuracy={c: draw(st.floats(0.5, 1.0)) for c in CATEGORIES},
            precision_rank=i,
        )
        e["latency"]["max_profiled_load"] = draw(st.integers(1, 64))
        entries.append(e)
    return compile_table(table(entries))


@st.composite
def _case(draw: st.DrawFn) -> tuple[CompiledTable, RouteRequest, HealthView, Seen, float]:
    t = draw(_table())
    facts = RequestFacts("f", "chat", 0.3, draw(st.integers(0, 20_000)), draw(st.integers(1, 2000)))
    budget = Budget(
        latency_s=draw(st.floats(0.05, 60.0)),
        ttft_s=draw(st.none() | st.floats(0.02, 5.0)),
        mode=draw(st.sampled_from([BudgetMode.BEST_EFFORT, BudgetMode.STRICT])),
    )
    ids = [e.id for p in t.pairs for e in p.endpoints]
    load = {i: float(draw(st.integers(0, 30))) for i in ids if draw(st.booleans())}
    margins = {p.pair: (draw(st.floats(0.0, 2.0)), 0.0) for p in t.pairs if draw(st.booleans())}
    mine = {p.pair: {"a": draw(st.integers(0, 5)), "b": draw(st.integers(0, 5))} for p in t.pairs}
    refused = {p.pair: {"c": 0.0} for p in t.pairs if draw(st.booleans())}
    share = draw(st.floats(0.01, 1.0))
    # the tenant's learned output lengths (`resilience.output_length`), some past max_tokens
    category = effective_limits(t, RouteRequest(facts, budget)).category
    outputs = {
        (p.family, category): draw(st.integers(1, 3000)) for p in t.pairs if draw(st.booleans())
    }
    # the bands above the class: their requests per second per pair (`resilience.band_arrivals`)
    above = {p.pair: draw(st.floats(0.0, 500.0)) for p in t.pairs if draw(st.booleans())}
    seen = Seen(mine, draw(st.floats(0.0, 3.0)), margins, refused, outputs, above)
    return t, RouteRequest(facts, budget), HealthView(load=load), seen, share


def _unloaded_feasible(t: CompiledTable, req: RouteRequest) -> set[str]:
    """The pairs `choose_route` finds feasible with nothing in flight anywhere."""
    idle = choose_route(t, req, HealthView(), random.Random(0))
    if not isinstance(idle, RouteDecision) or idle.reason not in _FEASIBLE:
        return set()
    return {c.pair.pair for c in idle.candidates}


def _verdicts(
    case: tuple[CompiledTable, RouteRequest, HealthView, Seen, float],
) -> tuple[Fleet | None, object, object]:
    t, req, health, seen, share = case
    klass = ("standard", PriorityClass(share=share, sheddable=True))
    result = choose_route(t, req, health, random.Random(1))
    fleet = fleet_of(t, req, health, seen, share)
    verdict = admit(t, req, health, result, klass, fleet)
    over = None if fleet is None else over_fair_share(fleet, "a", seen, 1.0)
    return fleet, verdict, over


@_SETTINGS
@given(_case())
def test_a_request_an_idle_pair_meets_is_never_refused(
    case: tuple[CompiledTable, RouteRequest, HealthView, Seen, float],
) -> None:
    t, req, health, _, _ = case
    meets = _unloaded_feasible(t, req)
    fleet, verdict, over = _verdicts(case)
    if meets:
        assert fleet is not None
        assert meets <= {p.pair for p in fleet.pairs}
    idle = any(
        health.load.get(e.id, 0.0) == 0.0 for p in t.pairs if p.pair in meets for e in p.endpoints
    )
    if idle:
        assert not isinstance(verdict, Shed)
        assert over is None


@_SETTINGS
@given(_case())
def test_never_refused_by_the_class_line_while_a_pair_is_below_it(
    case: tuple[CompiledTable, RouteRequest, HealthView, Seen, float],
) -> None:
    fleet, verdict, _ = _verdicts(case)
    if fleet is None:
        assert not isinstance(verdict, Shed)
        return
    assert all(1.0 <= p.line <= p.per_endpoint for p in fleet.pairs)
    below_line = {p.pair for p in fleet.pairs if p.least + 1.0 <= p.line}
    below = [p for p in fleet.pairs if p.least + 1.0 <= p.limit(fleet.pressed)]
    assert below_line <= {p.pair for p in below}
    assert isinstance(verdict, Shed) is (not below)
    if below and isinstance(verdict, RouteDecision):
        names = {p.pair for p in below}
        if any(c.pair.pair in names for c in verdict.candidates):
            assert verdict.candidates[0].pair.pair in names


@st.composite
def _tenants_case(
    draw: st.DrawFn,
) -> tuple[CompiledTable, RouteRequest, HealthView, Seen, float]:
    t, req, _, _, share = draw(_case())
    mine: dict[str, dict[str, int]] = {}
    load: dict[str, float] = {}
    for p in t.pairs:
        at = {n: draw(st.integers(0, 6)) for n in ("a", "b", "c") if draw(st.booleans())}
        mine[p.pair] = {n: k for n, k in at.items() if k}
        ours = sum(at.values())
        for i, e in enumerate(p.endpoints):  # ours on the first endpoint, others anywhere
            load[e.id] = float(draw(st.integers(0, 6)) + (ours if i == 0 else 0))
    refused = {p.pair: {"d": 0.0} for p in t.pairs if draw(st.booleans())}
    return t, req, HealthView(load=load), Seen(mine, 1.0, None, refused), share


@_SETTINGS
@given(_tenants_case())
def test_the_fair_share_shortcut_never_skips_a_refusal(
    case: tuple[CompiledTable, RouteRequest, HealthView, Seen, float],
) -> None:
    """`surely_within`, fed as the decision step feeds it (the served pair's line, this
    replica's part of it against all the load it sees, the tenant's in-flight count and the
    tenants active anywhere), holds only where `over_fair_share` would not refuse."""
    t, req, health, seen, share = case
    result = choose_route(t, req, health, random.Random(1))
    fleet = fleet_of(t, req, health, seen, share)
    if not isinstance(result, RouteDecision) or result.reason not in _FEASIBLE or fleet is None:
        return
    serving = result.candidates[0]
    room = next(p for p in fleet.pairs if p.pair == serving.pair.pair)
    tenants = seen.tenants or {}
    held = sum(at.get("a", 0) for at in tenants.values())
    active = len({n for at in tenants.values() for n in at} | {"a", "d"} if seen.refused else
                 {n for at in tenants.values() for n in at} | {"a"})  # fmt: skip
    mine = sum(tenants.get(serving.pair.pair, {}).values())
    floor = (mine + 1.0) / (sum(health.load.values()) + 1.0)
    if surely_within(held, active, room.line * len(serving.endpoints), floor):
        assert over_fair_share(fleet, "a", seen, 1.0) is None
