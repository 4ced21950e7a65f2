"""Predictions carry the fit's error and stay inside the profiled load range
(docs/data_plane.md "Predictions")."""

from __future__ import annotations

import random
from typing import Any

import pytest

from data_plane.decision.choose import choose_route
from data_plane.decision.compile import compile_table
from data_plane.domain import (
    Budget,
    CompiledTable,
    HealthView,
    Rejection,
    RequestFacts,
    RouteDecision,
    RouteReason,
    RouteRequest,
)
from tests.unit.data_plane.tables import entry, table


def _entry(quant: str, price: float, *, rmse: float = 0.0, top: int = 64, **kw: Any) -> Any:
    e = entry("m", quant, input_usd_per_mtok=price, output_usd_per_mtok=price, **kw)
    e["latency"].update(ttft_rmse_s=rmse, tpot_rmse_s=rmse / 100, max_profiled_load=top)
    return e


def _request(latency_s: float | None) -> RouteRequest:
    facts = RequestFacts(
        alias="auto", category="chat", complexity=0.1, input_chars=400, max_output_tokens=100
    )
    return RouteRequest(facts, Budget(latency_s=latency_s))


def _decide(t: CompiledTable, load: float, latency_s: float | None = 3.0) -> RouteDecision:
    health = HealthView(frozenset(), {e.id: load for p in t.pairs for e in p.endpoints})
    result = choose_route(t, _request(latency_s), health, random.Random(3))
    assert isinstance(result, RouteDecision)
    return result


@pytest.mark.parametrize(("quantile", "z"), [(0.5, 0.0), (0.95, 1.6448536), (0.99, 2.3263479)])
def test_the_fit_error_widens_the_prediction_at_the_table_quantile(
    quantile: float, z: float
) -> None:
    e = _entry("fp16", 1.0, rmse=0.2)
    e["latency"]["quantile"] = quantile
    pair = compile_table(table([e])).pairs[0]
    assert pair.ttft_base_s == pytest.approx(0.05 + z * 0.2)
    assert pair.tpot_base_s == pytest.approx(0.01 + z * 0.002)


def test_a_wide_fit_can_make_a_pair_too_slow() -> None:
    # Same line; the cheap pair's fit misses its points by 0.5 s RMSE: 0.82 s more at p95.
    t = compile_table(table([_entry("int4", 1.0, rmse=0.5), _entry("fp16", 2.0)]))
    exact = compile_table(table([_entry("int4", 1.0), _entry("fp16", 2.0)]))
    assert _decide(exact, 0, latency_s=1.5).candidates[0].pair.pair == "m@int4"
    wide = _decide(t, 0, latency_s=1.5)
    assert wide.candidates[0].pair.pair == "m@fp16"
    assert [r.reason for r in wide.rejected] == [Rejection.TOO_SLOW]


def test_a_load_beyond_the_profile_is_refused_not_extrapolated() -> None:
    # The cheap pair was profiled up to load 8; its line would still promise the budget.
    t = compile_table(table([_entry("int4", 1.0, top=8), _entry("fp16", 2.0)]))
    assert _decide(t, 7).candidates[0].pair.pair == "m@int4"  # load 8: measured
    beyond = _decide(t, 8)  # load 9 with this request
    assert beyond.candidates[0].pair.pair == "m@fp16"
    (rejected,) = beyond.rejected
    assert rejected.reason is Rejection.TOO_SLOW
    assert "beyond the highest profiled load 8" in rejected.detail


def test_without_a_latency_budget_the_profiled_range_does_not_matter() -> None:
    t = compile_table(table([_entry("int4", 1.0, top=8), _entry("fp16", 2.0)]))
    assert _decide(t, 20, latency_s=None).candidates[0].pair.pair == "m@int4"


def test_best_effort_ranks_an_extrapolated_pair_last() -> None:
    # Both too slow for 0.1 s; int4 looks faster on its line but is beyond its profile.
    t = compile_table(table([_entry("int4", 1.0, top=8), _entry("fp16", 2.0, tpot_base_s=0.02)]))
    d = _decide(t, 10, latency_s=0.1)
    assert d.reason is RouteReason.LATENCY_RELAXED
    assert [c.pair.pair for c in d.candidates] == ["m@fp16", "m@int4"]
