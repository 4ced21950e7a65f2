"""Utility formula and dominance, on hand-made figures."""

from __future__ import annotations

import pytest

from contracts.policy import Policy, UtilityWeights
from contracts.routing_table import LatencyModel
from control_plane.build.scoring import PairFigures, dominates, prune_dominated, utility_scores

CATS = ("chat", "code")


def model(ttft: float = 0.05, per_tok: float = 1e-5, per_load: float = 0.002,
          tpot: float = 0.01, tpot_load: float = 1e-4) -> LatencyModel:  # fmt: skip
    return LatencyModel(
        quantile=0.95,
        ttft_base_s=ttft,
        ttft_per_input_token_s=per_tok,
        ttft_per_load_s=per_load,
        tpot_base_s=tpot,
        tpot_per_load_s=tpot_load,
        max_profiled_load=16,
    )


def figures(pair: str, price: float = 1.0, acc: float = 0.8, ctx: int = 8192,
            latency: LatencyModel | None = None, family: str = "f") -> PairFigures:  # fmt: skip
    return PairFigures(
        pair=f"{family}@{pair}",
        family=family,
        input_usd_per_mtok=price / 4,
        output_usd_per_mtok=price,
        latency=latency or model(),
        accuracy={"chat": acc, "code": acc},
        context_length=ctx,
    )


def test_utility_matches_the_documented_formula() -> None:
    policy = Policy(utility_weights=UtilityWeights(accuracy=1.0, cost=0.5, latency=0.25))
    cheap = figures("cheap", price=1.0, acc=0.7, latency=model(tpot=0.01))
    dear = figures("dear", price=2.0, acc=0.9, latency=model(tpot=0.02))
    scores = utility_scores([cheap, dear], policy, ["chat"])
    n_in, n_out = policy.reference_input_tokens, policy.categories["chat"].typical_output_tokens
    lat_cheap = cheap.latency.latency_s(n_in, n_out, 1)
    lat_dear = dear.latency.latency_s(n_in, n_out, 1)
    # cost ratio of `cheap` is exactly 1/2 (all prices halve); latency ratio as computed.
    expected_cheap = 0.7 - 0.5 * 0.5 - 0.25 * lat_cheap / lat_dear
    assert scores["f@cheap"]["chat"] == pytest.approx(expected_cheap)
    assert scores["f@dear"]["chat"] == pytest.approx(0.9 - 0.5 - 0.25)


def test_utility_of_free_pairs_ignores_cost() -> None:
    policy = Policy()
    free = figures("free", price=0.0, acc=0.6)
    scores = utility_scores([free], policy, ["chat"])
    assert scores["f@free"]["chat"] == pytest.approx(0.6 - policy.utility_weights.latency)


def test_missing_category_counts_as_zero_accuracy() -> None:
    pair = figures("x", acc=0.9)
    assert pair.accuracy_in("math") == 0.0
    assert pair.mean_accuracy(["chat", "math"]) == pytest.approx(0.45)


def test_cheaper_faster_more_accurate_dominates() -> None:
    good = figures("good", price=1.0, acc=0.8)
    bad = figures("bad", price=1.5, acc=0.8)
    assert dominates(good, bad, CATS)
    assert not dominates(bad, good, CATS)


@pytest.mark.parametrize(
    ("name", "challenger"),
    [
        ("more accurate", figures("b", price=1.5, acc=0.85)),
        ("faster at load 1", figures("b", price=1.5, latency=model(tpot=0.009))),
        ("scales better with load", figures("b", price=1.5, latency=model(tpot_load=5e-5))),
        ("faster on long prompts", figures("b", price=1.5, latency=model(per_tok=5e-6))),
        ("longer context", figures("b", price=1.5, ctx=16384)),
        ("other family", figures("b", price=1.5, family="g")),
    ],
)
def test_a_pair_better_in_one_respect_is_not_dominated(name: str, challenger: PairFigures) -> None:
    assert not dominates(figures("a", price=1.0), challenger, CATS), name


def leveled(ttft_at_8: float = 0.01, per_tok_at_8: float = 1e-5) -> LatencyModel:
    """A model measured at loads 1, 8 and 16: the middle level's TTFT load term and extra
    cost per prompt token as given."""
    return model().model_copy(
        update={
            "load_levels": (1, 8, 16),
            "ttft_load_s": (0.0, ttft_at_8, 0.02),
            "tpot_load_s": (0.0, 0.001, 0.002),
            "ttft_per_input_load_s": (0.0, per_tok_at_8, 2e-5),
        }
    )


@pytest.mark.parametrize(
    ("name", "challenger"),
    [
        ("faster at a profiled level", figures("b", price=1.5, latency=leveled(ttft_at_8=0.005))),
        ("faster on long prompts under load", figures("b", price=1.5, latency=leveled(5e-6))),
    ],
)
def test_a_pair_faster_at_one_profiled_level_is_not_dominated(
    name: str, challenger: PairFigures
) -> None:
    assert not dominates(figures("a", price=1.0, latency=leveled()), challenger, CATS), name
    assert dominates(
        figures("a", latency=leveled()), figures("b", price=1.5, latency=leveled()), CATS
    )


def test_identical_pairs_do_not_dominate_each_other() -> None:
    a, b = figures("a"), figures("b")
    assert not dominates(a, b, CATS)
    assert not dominates(b, a, CATS)


def test_prune_names_a_kept_dominator_and_spares_protected() -> None:
    best = figures("best", price=1.0, acc=0.9)
    mid = figures("mid", price=2.0, acc=0.8)
    worst = figures("worst", price=3.0, acc=0.7)
    pruning = prune_dominated([worst, mid, best], CATS, protected=set())
    assert [p.pair for p in pruning.kept] == ["f@best"]
    assert pruning.pruned == (("f@mid", "f@best"), ("f@worst", "f@best"))
    spared = prune_dominated([worst, mid, best], CATS, protected={"f@worst"})
    assert [p.pair for p in spared.kept] == ["f@worst", "f@best"]
    assert spared.pruned == (("f@mid", "f@best"),)
