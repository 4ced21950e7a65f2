"""Best effort maximises the chance of meeting the whole request (issue 24, item 1;
docs/data_plane.md "Best effort", docs/accuracy.md "Best effort: the chance of meeting the
request")."""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np
import pytest

from contracts.accuracy_bound import lower_bound
from contracts.accuracy_posterior import posterior_tail
from data_plane.decision.chance import UNKNOWN, accuracy_tails, p_latency, tail_at
from data_plane.decision.choose import choose_route
from data_plane.decision.compile import compile_table
from data_plane.domain import (
    Budget,
    BudgetMode,
    CompiledTable,
    HealthView,
    NoRoute,
    RequestFacts,
    RouteDecision,
    RouteReason,
    RouteRequest,
)
from tests.unit.data_plane.tables import entry, table


def _pair(family: str, quant: str, right: int, tpot_s: float, usd: float, **kw: Any) -> Any:
    """A pair measured `right`/100 on chat (its 90% bound), 0.1 s to the first token and
    `tpot_s` per output token at load 1, a log spread of 0.1."""
    e = entry(
        family,
        quant,
        input_usd_per_mtok=usd / 4,
        output_usd_per_mtok=usd,
        ttft_base_s=0.09,
        ttft_per_input_token_s=0.0,
        ttft_per_load_s=0.01,
        tpot_base_s=tpot_s,
        tpot_per_load_s=0.0,
        log_spread=0.1,
        **kw,
    )
    e["accuracy"] = {"chat": right / 100}
    e["accuracy_n"] = {"chat": 100}
    e["accuracy_right"] = {"chat": right}
    e["accuracy_bound"] = {"chat": lower_bound(right, 100, 0.9)}
    e["utility"] = {"chat": 1.0}
    return e


def issue_fleet(big_tpot_s: float) -> CompiledTable:
    """The issue's chat case: 8B pairs measured 86/100 and 88/100 cannot prove 0.86; the 70B
    pairs (95/100, 96/100) prove it but are slower."""
    return compile_table(
        table(
            [
                _pair("llama8b", "int4", 86, 0.010, 0.2, precision_rank=1),
                _pair("llama8b", "bf16", 88, 0.012, 0.4),
                _pair("llama70b", "fp8", 95, big_tpot_s, 1.6, precision_rank=1),
                _pair("llama70b", "bf16", 96, big_tpot_s * 1.15, 2.0),
            ]
        )
    )


def _decide(t: CompiledTable, **budget: Any) -> RouteDecision | NoRoute:
    facts = RequestFacts("auto", "chat", 0.5, 400, 128)
    return choose_route(t, RouteRequest(facts, Budget(**budget)), HealthView(), random.Random(0))


def _decided(result: RouteDecision | NoRoute) -> RouteDecision:
    assert isinstance(result, RouteDecision), result
    return result


def test_nothing_provable_goes_to_the_pair_most_likely_to_meet_both() -> None:
    # 70B needs 0.1 + 128 x 0.027 = 3.56 s (and 4.1 s) for 2.95 s: P(latency) 0.38 at best;
    # 8B@bf16 fits the time for sure and P(88/100 is truly >= 0.86) = 0.67.
    d = _decided(_decide(issue_fleet(0.027), latency_s=2.95, min_accuracy=0.86))
    head = d.candidates[0]
    assert head.pair.pair == "llama8b@bf16"
    assert d.reason is RouteReason.FLOOR_RELAXED
    chance = head.chance
    assert chance is not None
    assert (chance.floor_proven, chance.latency_proven) == (False, True)
    assert chance.p_accuracy == pytest.approx(0.671, abs=0.002)
    assert chance.p_latency == pytest.approx(1.0, abs=1e-6)
    meets = [c.chance.p_meet for c in d.candidates if c.chance]
    assert meets == sorted(meets, reverse=True)  # the chain: most likely first
    assert max(meets) == chance.p_meet


def test_a_slow_pair_that_proves_the_floor_wins_when_its_latency_is_likelier() -> None:
    # 70B at 0.1 + 128 x 0.0235 = 3.11 s for 2.95 s: P(latency) = Phi(1.645 + ln(2.95/3.11)
    # / 0.1) = 0.87, times P(accuracy) ~ 1, beats 8B's 0.67.
    d = _decided(_decide(issue_fleet(0.0235), latency_s=2.95, min_accuracy=0.86))
    head = d.candidates[0]
    assert head.pair.pair == "llama70b@fp8"
    assert d.reason is RouteReason.LATENCY_RELAXED
    assert head.chance is not None
    expected = 0.5 * (1 + math.erf((1.6449 + math.log(2.95 / 3.108) / 0.1) / math.sqrt(2)))
    assert head.chance.p_latency == pytest.approx(expected, abs=0.01)


def test_strict_mode_is_unchanged() -> None:
    result = _decide(issue_fleet(0.027), latency_s=2.95, min_accuracy=0.86, mode=BudgetMode.STRICT)
    assert isinstance(result, NoRoute)


def test_feasible_decisions_carry_no_chance() -> None:
    d = _decided(_decide(issue_fleet(0.027), latency_s=10.0, min_accuracy=0.8))
    assert d.reason is RouteReason.CHEAPEST_FEASIBLE
    assert d.candidates[0].chance is None


def test_the_latency_chance_is_the_lines_quantile_under_the_spread() -> None:
    t = issue_fleet(0.027)
    c = _decided(_decide(t, min_accuracy=0.99)).candidates[0]
    z, predicted = c.pair.latency_z, c.predicted_latency_s
    assert z == pytest.approx(1.6449, abs=1e-4)
    assert p_latency(c, predicted, None) == pytest.approx(0.95, abs=1e-9)  # the p95 line
    assert p_latency(c, None, None) == 1.0
    assert p_latency(c, predicted / math.exp(z * 0.1), None) == pytest.approx(0.5, abs=1e-9)
    assert p_latency(c, None, c.predicted_ttft_s) == pytest.approx(0.95, abs=1e-9)
    # no spread (a table built before it): the prediction is exact
    flat = compile_table(table([entry("m", "bf16")]))
    d = _decided(_decide(flat, min_accuracy=0.99))
    c = d.candidates[0]
    assert p_latency(c, c.predicted_latency_s, None) == 1.0
    assert p_latency(c, c.predicted_latency_s * 0.999, None) == 0.0


def test_tails_interpolate_the_posterior() -> None:
    tail = accuracy_tails(table([_pair("llama8b", "bf16", 88, 0.012, 0.4)]).entries, 20)
    chat = tail["llama8b@bf16"]["chat"]
    for floor in (0.8, 0.8605, 0.9):
        exact = float(posterior_tail(88, 100, np.array([floor]))[0])
        assert tail_at(chat, floor) == pytest.approx(exact, abs=1e-3)
    assert tail_at(chat, 0.0) == 1.0
    assert tail_at(UNKNOWN, 0.5) == 0.0


def test_the_family_cap_caps_the_chance_and_unknown_stays_zero() -> None:
    ref = _pair("fam", "bf16", 85, 0.02, 1.0)
    lucky = _pair("fam", "int4", 96, 0.01, 0.2, precision_rank=1)
    lucky["accuracy_bound"] = dict(ref["accuracy_bound"])  # capped by its reference
    few = _pair("other", "bf16", 10, 0.01, 0.2)
    few["accuracy"], few["accuracy_n"], few["accuracy_right"] = (
        {"chat": 1.0},
        {"chat": 10},
        {"chat": 10},
    )
    few["accuracy_bound"] = {"chat": 0.0}
    t = compile_table(table([ref, lucky, few]))
    by = {p.pair: p for p in t.pairs}
    own = float(posterior_tail(96, 100, np.array([0.9]))[0])
    capped = tail_at(by["fam@int4"].accuracy_tail["chat"], 0.9)
    assert capped == pytest.approx(tail_at(by["fam@bf16"].accuracy_tail["chat"], 0.9))
    assert capped < own
    assert tail_at(by["other@bf16"].accuracy_tail["chat"], 0.5) == 0.0  # 10 < min_eval_items
