"""decision/capacity.py: sustainable concurrency for the budget in play, and overload as the
offered concurrency past what the fleet sustains (not a moment at full concurrency)."""

from __future__ import annotations

import math
import random

import pytest

from data_plane.decision.admission import admit
from data_plane.decision.capacity import (
    MARGIN_WINDOW_S,
    Fleet,
    Seen,
    calm,
    decayed,
    fleet_of,
    less_margin,
    sustainable_load,
)
from data_plane.decision.choose import choose_route
from data_plane.decision.feasibility import Limits
from data_plane.domain import Budget, BudgetMode, HealthView, RouteDecision
from data_plane.resilience.arrivals import Arrivals
from tests.unit.data_plane.admission_fleet import (
    BURST,
    ONE_X,
    STANDARD,
    bench_fleet,
    fleet,
    request,
)


def limits(latency_s: float | None, ttft_s: float | None = None) -> Limits:
    return Limits("chat", 15, latency_s, ttft_s, 0.0, None, BudgetMode.BEST_EFFORT)


def test_sustainable_concurrency_is_the_largest_load_that_meets_the_budget() -> None:
    pair = bench_fleet().pairs[0]
    assert sustainable_load(pair, limits(0.4), 8) == 8  # 0.39 s at 8, 0.42 s at 9
    assert sustainable_load(pair, limits(0.6), 8) == 15
    assert sustainable_load(pair, limits(0.1), 8) == 0  # 0.18 s even alone
    assert sustainable_load(pair, limits(None, ttft_s=0.02), 8) == 0
    # No latency budget in play: the profile's highest measured load, not the budget's.
    assert sustainable_load(pair, limits(None), 8) == 64


def test_the_fleet_is_the_pairs_that_meet_the_request_unloaded() -> None:
    found = fleet({}, 0.0)
    assert found is not None
    assert [(p.pair, p.per_endpoint) for p in found.pairs] == [("fam@int4", 8), ("fam@fp16", 8)]
    assert found.capacity == 16


@pytest.mark.parametrize(("offered", "overloaded"), [(ONE_X, False), (15.9, False), (16.5, True)])
def test_overload_is_offered_concurrency_past_the_sustainable(
    offered: float, overloaded: bool
) -> None:
    # Full concurrency on both pairs does not by itself make an overload.
    found = fleet({"fam@int4#0": 8, "fam@fp16#0": 8}, offered)
    assert found is not None
    assert found.overloaded is overloaded


def test_an_ejected_pair_leaves_the_fleet() -> None:
    health = HealthView(open_endpoints=frozenset({"fam@fp16#0"}))
    arrived = Seen({}, {"fam@int4": (9.0, 0.0)}, 0.0)  # all of it sent to int4 now
    found = fleet_of(bench_fleet(), request(), health, arrived)
    assert found is not None
    assert [p.pair for p in found.pairs] == ["fam@int4"]
    assert found.overloaded  # 9 in flight asked of the 8 one pair sustains


def test_no_fleet_when_no_pair_meets_the_request_even_unloaded() -> None:
    assert fleet({}, BURST, budget=Budget(latency_s=0.1)) is None


def test_a_replica_counts_its_own_part_of_the_fleet() -> None:
    # 16 in flight, 3 of them this replica's: with this request its part is 4 / 17 of the
    # 16 the fleet sustains, 3.8, which the 4.5 its traffic asks for exceeds.
    tenants = {"fam@int4": {"a": 3}}
    found = fleet({"fam@int4#0": 8, "fam@fp16#0": 8}, 4.5, tenants)
    assert found is not None
    assert found.part == pytest.approx(4 / 17)
    assert found.capacity == pytest.approx(16 * 4 / 17)
    assert found.overloaded


def test_offered_work_settles_at_rate_times_duration_and_decays_when_it_stops() -> None:
    now = [0.0]
    arrivals = Arrivals(lambda: now[0])
    for _ in range(100):  # 20 a second for 5 s, 0.3 s each: 6 in flight by Little's law
        arrivals.arrived("p", 0.3)
        now[0] += 0.05
    assert 5.7 <= decayed(arrivals.raw()["p"], now[0]) <= 6.31
    assert decayed(arrivals.raw()["p"], now[0] + 5.0) < 0.01
    assert decayed(None, 0.0) == 0.0


def test_a_door_that_sends_nothing_itself_takes_the_load_as_the_offered_concurrency() -> None:
    # Gateway mode: Envoy sends the requests; the scraped load, this request included, is all
    # the offered concurrency it sees, and its part of the fleet is the whole.
    def gateway(load: dict[str, float]) -> bool:
        health = HealthView(load=load)
        found = fleet_of(bench_fleet(), request(), health, Seen(None, None, 0))
        assert found is not None
        assert (found.part, found.capacity) == (1.0, 16)
        return found.overloaded

    assert gateway({"fam@int4#0": 8, "fam@fp16#0": 8})  # 17 asked of 16
    assert not gateway({"fam@int4#0": 7, "fam@fp16#0": 8})


def test_calm_when_all_the_work_sent_fits_the_chosen_pair_alone() -> None:
    """The fleet is computed only when it could be overloaded: not while everything this
    replica sends (all pairs together) would fit the pair just chosen (8 in flight)."""
    t, req = bench_fleet(), request()
    health = HealthView(load={"fam@int4#0": 3})
    chosen = choose_route(t, req, health, random.Random(1))
    assert isinstance(chosen, RouteDecision)
    mine = {"fam@int4": {"a": 3}}

    def seen_with(all_work: tuple[float, float] | None) -> Seen:
        return Seen(mine, {}, 0.0, all_work)

    assert calm(t, req, health, chosen.candidates[0], seen_with((7.9, 0.0)))
    assert not calm(t, req, health, chosen.candidates[0], seen_with((8.1, 0.0)))
    assert calm(t, req, health, chosen.candidates[0], seen_with((30.0, -5.0)))  # decayed
    assert not calm(t, req, health, chosen.candidates[0], seen_with(None))  # cannot tell


def test_the_margin_the_answers_ask_for_comes_off_the_budget_bounded() -> None:
    """0.15 + 0.03 L against 400 ms: 8 with no margin, 7 with 20 ms (0.36 s at 7, 0.39 s at
    8), 6 with 50 ms; a margin past a quarter of the budget takes that quarter (5: 0.30 s)."""
    pair = bench_fleet().pairs[0]
    assert sustainable_load(pair, limits(0.4), 8, margin_s=0.0) == 8
    assert sustainable_load(pair, limits(0.4), 8, margin_s=0.02) == 7
    assert sustainable_load(pair, limits(0.4), 8, margin_s=0.05) == 6
    assert sustainable_load(pair, limits(0.4), 8, margin_s=5.0) == 5
    assert less_margin(limits(0.4, 0.2), 0.02)[2:4] == pytest.approx((0.38, 0.18))
    assert less_margin(limits(None, 0.02), 0.02).ttft_s == pytest.approx(0.015)
    assert sustainable_load(pair, limits(None), 8, margin_s=0.05) == 64  # no budget: no margin


def test_a_fleet_with_a_margin_sustains_less_and_the_margin_decays() -> None:
    """15 in flight asked of two pairs: within the 16 they sustain on the table's word, past
    the 14 they sustain once the 20 ms their answers run late is allowed for; a margin
    estimated long ago (no answers since) fades back to the table's word."""
    load = {"fam@int4#0": 7, "fam@fp16#0": 7}
    tenants = {"fam@int4": {"a": 7}, "fam@fp16": {"a": 7}}
    work = {"fam@int4": (7.5, 0.0), "fam@fp16": (7.5, 0.0)}

    def found(margins: dict[str, tuple[float, float]], now: float = 0.0) -> Fleet:
        seen = Seen(tenants, work, now, None, margins)
        got = fleet_of(bench_fleet(), request(), HealthView(load=load), seen)
        assert got is not None
        return got

    assert not found({}).overloaded
    late = found({"fam@int4": (0.02, 0.0), "fam@fp16": (0.02, 0.0)})
    assert [p.per_endpoint for p in late.pairs] == [7, 7]
    assert late.overloaded
    assert found({"fam@int4": (0.02, -100.0), "fam@fp16": (0.02, -100.0)}).capacity == 16
    assert Seen(None, None, 10.0, None, {"p": (0.02, 0.0)}).margin_s("p") == pytest.approx(
        0.02 * math.exp(-10.0 / MARGIN_WINDOW_S)
    )


def test_a_margin_alone_never_makes_an_idle_fleet_overloaded() -> None:
    """A tight 200 ms budget the int4 pair meets idle (0.18 s) but not once a 30 ms margin
    is allowed for (0.17 s left): nothing in flight anywhere, a trickle of work arriving.
    The miss is the prediction's error, which no wait cures: the pair still sustains one
    request, the fleet is not overloaded and admission serves the request as decided."""
    tight = Budget(latency_s=0.2)
    margins = {"fam@int4": (0.03, 0.0), "fam@fp16": (0.03, 0.0)}
    pair = bench_fleet().pairs[0]
    assert sustainable_load(pair, limits(0.2), 8, margin_s=0.03) == 0
    seen = Seen({}, {"fam@int4": (0.2, 0.0)}, 0.0, (0.2, 0.0), margins)
    health = HealthView(load={})
    found = fleet_of(bench_fleet(), request(tight), health, seen)
    assert found is not None
    assert [p.per_endpoint for p in found.pairs] == [1.0, 1.0]
    assert not found.overloaded
    decided = choose_route(bench_fleet(), request(tight), health, random.Random(0))
    assert isinstance(decided, RouteDecision)
    assert calm(bench_fleet(), request(tight), health, decided.candidates[0], seen)
    verdict = admit(bench_fleet(), request(tight), health, decided, STANDARD, found)
    assert verdict is decided
