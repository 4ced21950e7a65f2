"""rollout.py: shadow mode and the canary split keep the adaptive decision for counting."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from data_plane.decision.choose import choose_route
from data_plane.decision.compile import compile_table
from data_plane.decision.rollout import apply_rollout
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


def fleet(policy: dict[str, object] | None = None) -> CompiledTable:
    return compile_table(
        table(
            [
                entry("a", "int4", input_usd_per_mtok=0.1, precision_rank=2, endpoints=2),
                entry("a", "bf16", input_usd_per_mtok=0.5, endpoints=2),
                entry("b", "bf16", input_usd_per_mtok=0.9),
            ],
            policy=policy,
        )
    )


def decide(t: CompiledTable, alias: str = "auto", **budget: object) -> RouteDecision:
    facts = RequestFacts(alias, "chat", 0.2, 800, 50)
    result = choose_route(t, RouteRequest(facts, Budget(**budget)), HealthView(), random.Random(3))  # type: ignore[arg-type]
    assert isinstance(result, RouteDecision)
    return result


def test_no_rollout_returns_the_decision_itself() -> None:
    t = fleet()
    d = decide(t)
    assert apply_rollout(d, t, 0.0) is d
    assert apply_rollout(d, t, 0.999) is d


def test_shadow_routes_to_the_default_pair_and_keeps_the_adaptive_choice() -> None:
    t = fleet({"shadow": {"enabled": True, "default_pair": "b@bf16"}})
    d = decide(t)
    out = apply_rollout(d, t, 0.5)
    assert out.reason is RouteReason.SHADOW
    assert [c.pair.pair for c in out.candidates] == ["b@bf16"]  # no fallback to other pairs
    assert out.adaptive is d
    assert out.adaptive.candidates[0].pair.pair == "a@int4"
    # the default pair was a candidate: its figures and endpoint order are reused
    assert out.candidates[0] is d.candidates[2]
    assert (out.category, out.alias, out.min_accuracy) == (d.category, d.alias, d.min_accuracy)


def test_shadow_to_a_pair_that_was_rejected_gets_a_fresh_estimate() -> None:
    t = fleet({"shadow": {"enabled": True, "default_pair": "a@bf16"}})
    d = decide(t, max_cost_usd=0.00009)  # a@bf16 costs 800/4*0.5e-6 + 50*0.4e-6 = 0.00012
    assert [c.pair.pair for c in d.candidates] == ["a@int4"]
    out = apply_rollout(d, t, 0.0)
    (c,) = out.candidates
    assert c.pair.pair == "a@bf16"
    assert [e.id for e in c.endpoints] == ["a@bf16#0", "a@bf16#1"]  # table order
    assert (c.input_tokens, c.output_tokens, c.load) == (200, 50, 1.0)
    assert c.estimated_cost_usd == pytest.approx((200 * 0.5 + 50 * 0.4) / 1e6)


def test_shadow_ignores_pairs_the_model_field_does_not_allow() -> None:
    t = fleet({"shadow": {"enabled": True, "default_pair": "b@bf16"}})
    d = decide(t, alias="a")
    assert apply_rollout(d, t, 0.0) is d


def test_shadow_with_a_default_pair_missing_from_the_table_changes_nothing() -> None:
    t = fleet({"shadow": {"enabled": True, "default_pair": "zzz@fp8"}})
    d = decide(t)
    assert apply_rollout(d, t, 0.0) is d


def test_shadow_wins_over_the_canary() -> None:
    t = fleet({"shadow": {"enabled": True, "default_pair": "b@bf16"}, "canary_fraction": 0.0})
    assert apply_rollout(decide(t), t, 0.9).reason is RouteReason.SHADOW


def test_canary_split_by_draw() -> None:
    t = fleet({"canary_fraction": 0.25})
    d = decide(t)
    inside = apply_rollout(d, t, 0.2499)
    assert inside is d
    outside = apply_rollout(d, t, 0.25)
    assert outside.reason is RouteReason.CANARY_BASELINE
    assert [c.pair.pair for c in outside.candidates] == ["a@bf16"]  # the family's baseline
    assert outside.adaptive is d


def test_canary_zero_sends_everything_to_baselines() -> None:
    t = fleet({"canary_fraction": 0.0})
    assert apply_rollout(decide(t), t, 0.0).reason is RouteReason.CANARY_BASELINE


def test_canary_leaves_pinned_pairs_alone() -> None:
    t = fleet({"canary_fraction": 0.0})
    d = decide(t, alias="a@int4")
    assert apply_rollout(d, t, 0.7) is d


def test_canary_without_a_baseline_changes_nothing() -> None:
    t = fleet({"canary_fraction": 0.0})
    bare = replace(t, baselines={})
    d = decide(bare)
    assert apply_rollout(d, bare, 0.7) is d


def test_unknown_alias_on_a_decision_counts_as_auto() -> None:
    t = fleet({"shadow": {"enabled": True, "default_pair": "b@bf16"}})
    d = replace(decide(t), alias="renamed-since")
    assert apply_rollout(d, t, 0.0).candidates[0].pair.pair == "b@bf16"
