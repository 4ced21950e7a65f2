"""A request longer than every healthy pair's context (issue 13 item 7): context_length words,
unless a pair it fits is only ejected by its breaker (then it is a retry-later 503)."""

from __future__ import annotations

import random

from data_plane.decision.choose import choose_route
from data_plane.decision.compile import compile_table
from data_plane.decision.no_route import no_route_error
from data_plane.domain import (
    Budget,
    BudgetMode,
    CompiledTable,
    HealthView,
    NoRoute,
    NoRouteReason,
    Rejection,
    RequestFacts,
    RouteRequest,
)
from tests.unit.data_plane.tables import entry, table


def two_contexts() -> CompiledTable:
    return compile_table(
        table([entry("a", "int4", context_length=2048), entry("a", "bf16", context_length=16384)])
    )


def route(t: CompiledTable, chars: int, ejected: frozenset[str], mode: BudgetMode) -> NoRoute:
    facts = RequestFacts("auto", "chat", 0.1, chars, 100)
    health = HealthView(open_endpoints=ejected)
    result = choose_route(t, RouteRequest(facts, Budget(mode=mode)), health, random.Random(0))
    assert isinstance(result, NoRoute)
    return result


def test_longer_than_every_context_names_the_largest() -> None:
    for mode in BudgetMode:
        result = route(two_contexts(), 100_000, frozenset(), mode)
        assert result.binding is Rejection.CONTEXT_TOO_LONG
        assert "maximum context length is 16384 tokens" in result.detail
        error = no_route_error(result, 5.0)
        assert (error.status, error.code) == (400, "context_length_exceeded")


def test_a_fitting_pair_behind_an_open_breaker_is_a_503_not_a_400() -> None:
    for mode in BudgetMode:
        result = route(two_contexts(), 20_000, frozenset({"a@bf16#0"}), mode)
        assert result.reason is NoRouteReason.ALL_UNHEALTHY, mode
        assert "ejected by its breaker" in result.detail
        error = no_route_error(result, 5.0)
        assert (error.status, error.code) == (503, "no_healthy_upstream")
