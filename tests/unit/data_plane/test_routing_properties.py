"""choose_route properties over random tables, requests and health snapshots (hypothesis)."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from data_plane.decision.choose import choose_route, effective_limits, first_violation, predict
from data_plane.decision.compile import compile_table
from data_plane.decision.feasibility import latency_violation
from data_plane.domain import (
    Budget,
    BudgetMode,
    Candidate,
    CompiledPair,
    CompiledTable,
    HealthView,
    NoRoute,
    NoRouteReason,
    Rejection,
    RequestFacts,
    RouteDecision,
    RouteReason,
    RouteRequest,
)
from tests.unit.data_plane.tables import CATEGORIES, entry, table

_ratio = st.floats(0.0, 1.0)


@st.composite
def _entries(draw: st.DrawFn) -> list[dict[str, Any]]:
    n = draw(st.integers(1, 5))
    entries = []
    for i in range(n):
        entries.append(
            entry(
                draw(st.sampled_from(["f", "g"])),
                f"q{i}",
                # at most two endpoints: power-of-two-choices then always picks the least loaded
                endpoints=draw(st.integers(1, 2)),
                context_length=draw(st.integers(512, 16384)),
                chars_per_token=draw(st.floats(2.0, 5.0)),
                input_usd_per_mtok=draw(st.floats(0.0, 5.0)),
                output_usd_per_mtok=draw(st.floats(0.0, 20.0)),
                ttft_base_s=draw(st.floats(0.0, 1.0)),
                ttft_per_input_token_s=draw(st.floats(0.0, 1e-3)),
                ttft_per_load_s=draw(st.floats(0.0, 0.2)),
                tpot_base_s=draw(st.floats(0.001, 0.05)),
                tpot_per_load_s=draw(st.floats(0.0, 0.01)),
                accuracy={c: draw(_ratio) for c in CATEGORIES if draw(st.booleans())},
                precision_rank=draw(st.integers(0, 3)),
            )
        )
    return entries


@dataclass(frozen=True)
class Case:
    table: CompiledTable
    req: RouteRequest
    health: HealthView
    seed: int


@st.composite
def cases(draw: st.DrawFn) -> Case:
    entries = _entries()
    t = compile_table(
        table(
            draw(entries), policy={"budget_mode": draw(st.sampled_from(["best-effort", "strict"]))}
        )
    )
    endpoint_ids = sorted(e.id for p in t.pairs for e in p.endpoints)
    aliases = ["auto", "f", "g", "nope", *(p.pair for p in t.pairs)]
    alias = draw(st.sampled_from([a for a in aliases if a in t.by_alias or a == "nope"]))
    facts = RequestFacts(
        alias=alias,
        category=draw(st.sampled_from([*CATEGORIES, "other"])),
        complexity=draw(_ratio),
        input_chars=draw(st.integers(0, 60_000)),
        max_output_tokens=draw(st.none() | st.integers(1, 4000)),
    )
    budget = Budget(
        latency_s=draw(st.none() | st.floats(0.05, 60.0)),
        ttft_s=draw(st.none() | st.floats(0.05, 5.0)),
        min_accuracy=draw(st.none() | _ratio),
        max_cost_usd=draw(st.none() | st.floats(1e-7, 0.1)),
        mode=draw(st.none() | st.sampled_from(list(BudgetMode))),
        category=draw(st.none() | st.sampled_from(CATEGORIES)),
    )
    health = HealthView(
        open_endpoints=frozenset(draw(st.lists(st.sampled_from(endpoint_ids), max_size=4))),
        load={i: draw(st.floats(0.0, 30.0)) for i in endpoint_ids if draw(st.booleans())},
    )
    return Case(t, RouteRequest(facts, budget), health, draw(st.integers(0, 2**32)))


def _run(case: Case) -> RouteDecision | NoRoute:
    return choose_route(case.table, case.req, case.health, random.Random(case.seed))


def _best(case: Case, pair_name: str) -> Candidate | None:
    """The pair's prediction at its least-loaded live endpoint (None if all are ejected)."""
    pair = next(p for p in case.table.pairs if p.pair == pair_name)
    live = [e for e in pair.endpoints if e.id not in case.health.open_endpoints]
    if not live:
        return None
    best = min(live, key=lambda e: case.health.load.get(e.id, 0.0))
    limits = effective_limits(case.table, case.req)
    return predict(
        pair, (best,), case.req.facts.input_chars, limits.output_tokens, case.health.load
    )


_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_SETTINGS
@given(cases())
def test_same_inputs_same_output(case: Case) -> None:
    assert _run(case) == _run(case)


@_SETTINGS
@given(cases())
def test_open_endpoints_are_never_candidates(case: Case) -> None:
    result = _run(case)
    if isinstance(result, RouteDecision):
        for c in result.candidates:
            assert c.endpoints
            assert not {e.id for e in c.endpoints} & case.health.open_endpoints


@_SETTINGS
@given(cases())
def test_every_cheapest_feasible_candidate_is_feasible(case: Case) -> None:
    result = _run(case)
    limits = effective_limits(case.table, case.req)
    if isinstance(result, RouteDecision) and result.reason is RouteReason.CHEAPEST_FEASIBLE:
        for c in result.candidates:
            assert first_violation(c, limits) is None
            if limits.latency_s is not None:
                assert c.predicted_latency_s <= limits.latency_s
            if limits.max_cost_usd is not None:
                assert c.estimated_cost_usd <= limits.max_cost_usd
            assert c.pair.accuracy.get(limits.category, 0.0) >= limits.min_accuracy
            assert c.input_tokens + c.output_tokens <= c.pair.context_length


@_SETTINGS
@given(cases())
def test_no_cheaper_feasible_pair_is_skipped(case: Case) -> None:
    result = _run(case)
    if case.req.facts.alias not in case.table.by_alias:
        assert isinstance(result, NoRoute)
        assert result.reason is NoRouteReason.UNKNOWN_MODEL
        return
    limits = effective_limits(case.table, case.req)
    allowed = [p.pair for p in case.table.by_alias[case.req.facts.alias]]
    feasible = {
        name: c
        for name in allowed
        if (c := _best(case, name)) is not None and first_violation(c, limits) is None
    }
    if not feasible:
        assert isinstance(result, NoRoute) or result.reason is not RouteReason.CHEAPEST_FEASIBLE
        return
    assert isinstance(result, RouteDecision)
    assert result.reason is RouteReason.CHEAPEST_FEASIBLE
    assert {c.pair.pair for c in result.candidates} == set(feasible)
    keys = [(c.estimated_cost_usd, c.predicted_latency_s, c.pair.order) for c in result.candidates]
    assert keys == sorted(keys)
    assert result.candidates[0].estimated_cost_usd == min(
        c.estimated_cost_usd for c in feasible.values()
    )


@_SETTINGS
@given(cases())
def test_every_allowed_pair_is_accounted_for(case: Case) -> None:
    result = _run(case)
    if isinstance(result, NoRoute) and result.reason is NoRouteReason.UNKNOWN_MODEL:
        return
    allowed = {p.pair for p in case.table.by_alias[case.req.facts.alias]}
    rejected = {r.pair: r.reason for r in result.rejected}
    assert len(rejected) == len(result.rejected)  # one reason per pair
    assert {p for p, r in rejected.items() if r is Rejection.NOT_ALLOWED} == (
        {p.pair for p in case.table.pairs} - allowed
    )
    if isinstance(result, RouteDecision) and result.reason is RouteReason.CHEAPEST_FEASIBLE:
        chosen = {c.pair.pair for c in result.candidates}
        assert chosen | set(rejected) == {p.pair for p in case.table.pairs}
        assert not chosen & set(rejected)


@_SETTINGS
@given(cases())
def test_all_unhealthy_exactly_when_the_pairs_that_could_serve_are_ejected(case: Case) -> None:
    """ALL_UNHEALTHY (a retry-later 503) when every allowed endpoint is ejected, or when the
    prompt is too long for every live allowed pair but fits one that is only ejected by its
    breaker (docs/reliability.md: then it is not a 400 context_length_exceeded)."""
    result = _run(case)
    if case.req.facts.alias not in case.table.by_alias:
        return
    allowed = case.table.by_alias[case.req.facts.alias]
    opened = case.health.open_endpoints
    out = effective_limits(case.table, case.req).output_tokens

    def fits(p: CompiledPair) -> bool:
        return math.ceil(case.req.facts.input_chars / p.chars_per_token) + out <= p.context_length

    def ejected(p: CompiledPair) -> bool:
        return all(e.id in opened for e in p.endpoints)

    all_open = all(ejected(p) for p in allowed)
    only_ejected_fit = not any(fits(p) for p in allowed if not ejected(p)) and any(
        fits(p) for p in allowed if ejected(p)
    )
    unhealthy = isinstance(result, NoRoute) and result.reason is NoRouteReason.ALL_UNHEALTHY
    assert unhealthy == (all_open or only_ejected_fit)


@_SETTINGS
@given(cases())
def test_relaxation_rules(case: Case) -> None:
    result = _run(case)
    limits = effective_limits(case.table, case.req)
    if isinstance(result, NoRoute):
        if result.reason is NoRouteReason.BUDGET_INFEASIBLE:
            assert result.binding is not None
            if limits.mode is BudgetMode.BEST_EFFORT:
                assert result.binding in (Rejection.CONTEXT_TOO_LONG, Rejection.TOO_EXPENSIVE)
        return
    if result.reason is RouteReason.CHEAPEST_FEASIBLE:
        return
    assert limits.mode is BudgetMode.BEST_EFFORT  # strict mode never relaxes
    chances = []
    for c in result.candidates:
        # context and cost always hold; each candidate says truly what the table proves
        assert first_violation(c, limits, relax_latency=True, relax_floor=True) is None
        chance = c.chance
        assert chance is not None
        floor_kept = first_violation(c, limits, relax_latency=True) is None
        assert chance.floor_proven == floor_kept
        assert chance.latency_proven == (latency_violation(c, limits) is None)
        assert not (chance.floor_proven and chance.latency_proven)  # else it was feasible
        assert 0.0 <= chance.p_meet <= 1.0
        beyond = c.load > c.pair.max_profiled_load and (
            limits.latency_s is not None or limits.ttft_s is not None
        )
        chances.append((beyond, -chance.p_meet))
    assert chances == sorted(chances)  # most likely to meet the request first
    head = result.candidates[0].chance
    assert head is not None
    assert result.reason is head.reason
