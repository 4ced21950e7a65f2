"""decision/saturation.py: a request's fleet is every pair that meets it unloaded, and it is
full only when each holds, in flight, what the request's class may fill there."""

from __future__ import annotations

import math
import random

import pytest

from data_plane.decision.admission import admit
from data_plane.decision.capacity import MARGIN_WINDOW_S, sustainable_load
from data_plane.decision.choose import choose_route
from data_plane.decision.feasibility import effective_limits
from data_plane.decision.saturation import Fleet, Seen, fleet_of
from data_plane.domain import Budget, HealthView, RouteDecision
from tests.unit.data_plane.admission_fleet import (
    FP16,
    INT4,
    STANDARD,
    bench_fleet,
    fleet,
    request,
)
from tests.unit.data_plane.test_capacity import limits


def test_the_fleet_is_the_pairs_that_meet_the_request_unloaded() -> None:
    found = fleet({}, share=1.0)
    assert found is not None
    assert [(p.pair, p.per_endpoint, p.line) for p in found.pairs] == [
        ("fam@int4", 8, 8),
        ("fam@fp16", 8, 8),
    ]
    assert found.capacity == 16
    assert not found.full


@pytest.mark.parametrize(
    ("load", "pressed", "full"),
    [
        ({INT4: 5, FP16: 5}, False, False),
        ({INT4: 8, FP16: 3}, False, False),  # 12 with it: not past 75% of 16
        ({INT4: 8, FP16: 4}, True, False),  # 13: pressed, fp16 below its line of 6
        ({INT4: 6, FP16: 6}, True, True),
        ({INT4: 8, FP16: 8}, True, True),
    ],
)
def test_full_is_every_pair_at_what_the_class_may_fill(
    load: dict[str, float], pressed: bool, full: bool
) -> None:
    found = fleet(load)  # standard: 6 of 8 a pair once pressed, else 8
    assert found is not None
    assert (found.pressed, found.full) == (pressed, full)


def test_an_ejected_pair_leaves_the_fleet() -> None:
    health = HealthView(load={INT4: 8}, open_endpoints=frozenset({FP16}))
    found = fleet_of(bench_fleet(), request(), health, Seen({}, 0.0), 0.75)
    assert found is not None
    assert [p.pair for p in found.pairs] == ["fam@int4"]
    assert found.full


def test_no_fleet_when_no_pair_meets_the_request_even_unloaded() -> None:
    assert fleet({}, budget=Budget(latency_s=0.1)) is None


def test_a_replica_counts_its_own_part_of_the_fleet() -> None:
    # 16 in flight, 3 of them this replica's: with this request its part is 4 / 17.
    found = fleet({INT4: 8, FP16: 8}, {"fam@int4": {"a": 3}}, share=1.0)
    assert found is not None
    assert found.part == pytest.approx(4 / 17)
    assert found.capacity == pytest.approx(16 * 4 / 17)


def test_a_door_that_sends_nothing_itself_has_the_whole_fleet_as_its_part() -> None:
    # No tenant counts (`Seen.tenants` None): all the load it sees is judged as its part.
    health = HealthView(load={INT4: 8, FP16: 7})
    found = fleet_of(bench_fleet(), request(), health, Seen(None, 0.0), 1.0)
    assert found is not None
    assert (found.part, found.capacity, found.pressed, found.full) == (1.0, 16, False, False)


def test_a_fleet_with_a_margin_sustains_less_and_the_margin_decays() -> None:
    """7 in flight a pair: room within the 8 they sustain on the table's word, none within
    the 7 they sustain once the 20 ms their answers run late is allowed for; a margin
    estimated long ago (no answers since) fades back to the table's word."""
    health = HealthView(load={INT4: 7, FP16: 7})

    def found(margins: dict[str, tuple[float, float]], now: float = 0.0) -> Fleet:
        got = fleet_of(bench_fleet(), request(), health, Seen({}, now, margins), 1.0)
        assert got is not None
        return got

    assert not found({}).full
    late = found({"fam@int4": (0.02, 0.0), "fam@fp16": (0.02, 0.0)})
    assert [p.per_endpoint for p in late.pairs] == [7, 7]
    assert late.full
    assert not found({"fam@int4": (0.02, -100.0), "fam@fp16": (0.02, -100.0)}).full
    assert Seen(None, 10.0, {"p": (0.02, 0.0)}).margin_s("p") == pytest.approx(
        0.02 * math.exp(-10.0 / MARGIN_WINDOW_S)
    )


def test_a_margin_alone_never_makes_an_idle_fleet_full() -> None:
    """A tight 200 ms budget the int4 pair meets idle (0.18 s) but not once a 30 ms margin
    is allowed for (0.17 s left), nothing in flight anywhere. The miss is the prediction's
    error, which no wait cures: the pair still takes one request, and admission serves the
    request as decided."""
    tight = Budget(latency_s=0.2)
    margins = {"fam@int4": (0.03, 0.0), "fam@fp16": (0.03, 0.0)}
    assert sustainable_load(bench_fleet().pairs[0], limits(0.2), 8, margin_s=0.03) == 0
    health = HealthView(load={})
    found = fleet_of(bench_fleet(), request(tight), health, Seen({}, 0.0, margins), 0.75)
    assert found is not None
    assert [(p.per_endpoint, p.line) for p in found.pairs] == [(1.0, 1.0), (1.0, 1.0)]
    assert not found.full
    decided = choose_route(bench_fleet(), request(tight), health, random.Random(0))
    assert isinstance(decided, RouteDecision)
    assert admit(bench_fleet(), request(tight), health, decided, STANDARD, found) is decided


def learned(tokens: int, family: str = "fam") -> Seen:
    """The requesting tenant's answers in the request's category run to `tokens`."""
    category = effective_limits(bench_fleet(), request()).category
    return Seen({}, 0.0, None, None, {(family, category): tokens})


def test_a_learned_output_length_sizes_the_fleet_and_the_service_time() -> None:
    """The request allows 15 tokens (0.15 + 0.03 L s at load L: 8 sustained in 400 ms); its
    tenant's answers run to 5 (0.07 + 0.01 L s: 33 sustained), so each pair sustains 33 and
    its idle service time, the queue's deadline rule's, is 0.08 s, not 0.18 s."""
    health = HealthView(load={INT4: 8, FP16: 8})
    found = fleet_of(bench_fleet(), request(), health, learned(5), 1.0)
    assert found is not None
    assert [p.per_endpoint for p in found.pairs] == [33, 33]
    assert not found.full
    assert found.pairs[0].candidate.predicted_latency_s == pytest.approx(0.08)
    at_cap = fleet_of(bench_fleet(), request(), health, Seen({}, 0.0), 1.0)
    assert at_cap is not None
    assert at_cap.full
    assert at_cap.pairs[0].candidate.predicted_latency_s == pytest.approx(0.18)


def test_a_learned_length_past_max_tokens_or_of_another_family_changes_nothing() -> None:
    for seen in (learned(100), learned(5, family="other")):
        found = fleet_of(bench_fleet(), request(), HealthView(load={INT4: 8}), seen, 1.0)
        assert found is not None
        assert [p.per_endpoint for p in found.pairs] == [8, 8]


def test_a_request_its_max_tokens_rule_out_is_in_the_fleet_at_its_learned_length() -> None:
    """A 100 ms budget: 15 tokens take 0.18 s idle (no pair meets it), 5 take 0.08 s."""
    tight = request(Budget(latency_s=0.1))
    assert fleet_of(bench_fleet(), tight, HealthView(), Seen({}, 0.0), 1.0) is None
    found = fleet_of(bench_fleet(), tight, HealthView(), learned(5), 1.0)
    assert found is not None
    assert [p.per_endpoint for p in found.pairs] == [3, 3]


# 5 of the 8 a pair sustains: at 0.39 s each (the pair's time at its sustainable 8), this many
# critical requests a second hold 5 in flight on average (Little's law).
_FILLS_5 = 5.0 / 0.39


def _lines(share: float, above: dict[str, float] | None) -> list[tuple[str, float]]:
    health = HealthView(load={INT4: 6, FP16: 6})
    found = fleet_of(bench_fleet(), request(), health, Seen({}, 0.0, above=above), share)
    assert found is not None
    return [(p.pair, p.line) for p in found.pairs]


def test_a_higher_bands_demand_at_a_pair_lowers_the_lines_below_it_there() -> None:
    """Critical requests at a rate that fills 5 of 8 at int4 leave the standard class 3
    there (8 - 5), and batch 3 (below its own line of 4); fp16, without them, keeps 6."""
    above = {"fam@int4": _FILLS_5}
    assert _lines(0.75, above) == [("fam@int4", 3.0), ("fam@fp16", 6.0)]
    assert _lines(0.5, above) == [("fam@int4", 3.0), ("fam@fp16", 4.0)]
    assert _lines(0.75, None) == _lines(0.75, {}) == [("fam@int4", 6.0), ("fam@fp16", 6.0)]


def test_the_reserve_holds_while_the_fleet_is_not_pressed_too() -> None:
    """3 in flight of 16 does not press the fleet (the standard class may fill 8 a pair),
    but with critical requests filling 5 of int4's 8 a standard one may not be the 4th
    there; without them it may."""
    health = HealthView(load={INT4: 3})
    table, req = bench_fleet(), request()
    busy = fleet_of(table, req, health, Seen({}, 0.0, above={"fam@int4": _FILLS_5}), 0.75)
    calm = fleet_of(table, req, health, Seen({}, 0.0), 0.75)
    assert busy is not None
    assert calm is not None
    assert not busy.pressed
    assert busy.with_room() == {"fam@fp16"}
    assert calm.with_room() == {"fam@int4", "fam@fp16"}


def test_the_reserve_never_leaves_less_than_one_nor_touches_the_top_band() -> None:
    """A demand past what the pair sustains still leaves 1 a pair (an idle pair never
    refuses); the top band has no band above it, so nothing is reserved against it."""
    assert _lines(0.75, {"fam@int4": 1000.0}) == [("fam@int4", 1.0), ("fam@fp16", 6.0)]
    idle = fleet_of(
        bench_fleet(), request(), HealthView(), Seen({}, 0.0, above={"fam@int4": 1000.0}), 0.75
    )
    assert idle is not None
    assert not idle.full
    assert _lines(1.0, {}) == [("fam@int4", 8.0), ("fam@fp16", 8.0)]
