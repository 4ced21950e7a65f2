"""The one-sided accuracy bound floors are compared with: coverage on synthetic eval sets with a
known true accuracy, and the figures the profiler's 'undecided' report rests on."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from contracts.accuracy_bound import (
    agreement_bounds,
    better_than_reference,
    decides,
    items_to_decide,
    lower_bound,
    routing_bound,
    upper_bound,
)

TRUE_ACCURACIES = (0.05, 0.5, 0.62, 0.78, 0.8, 0.83, 0.9, 0.95, 0.99)
SIZES = (20, 25, 57, 100, 250)


@pytest.mark.parametrize("confidence", [0.8, 0.9, 0.95])
@pytest.mark.parametrize("n", SIZES)
def test_never_over_confident_over_simulated_eval_sets(n: int, confidence: float) -> None:
    """Over many simulated eval sets of n items, the true accuracy falls below the bound no
    more often than 1 - confidence (within three standard errors of simulation)."""
    rng = np.random.default_rng(12345 + n)
    draws = 20_000
    bounds = np.array([lower_bound(k, n, confidence) for k in range(n + 1)])
    alpha = 1.0 - confidence
    slack = 3.0 * math.sqrt(alpha * confidence / draws)
    for p in TRUE_ACCURACIES:
        right = rng.binomial(n, p, size=draws)
        misses = float(np.mean(bounds[right] > p))
        assert misses <= alpha + slack, (p, n, misses)


@pytest.mark.parametrize("n", SIZES)
def test_exact_miss_probability_is_at_most_alpha(n: int) -> None:
    """The same claim without simulation error: sum P(K = k) over the k whose bound exceeds p,
    on a fine grid of true accuracies."""
    from scipy.stats import binom

    bounds = np.array([lower_bound(k, n, 0.9) for k in range(n + 1)])
    ks = np.arange(n + 1)
    for p in np.linspace(0.01, 0.99, 197):
        miss = float(binom.pmf(ks, n, p)[bounds > p].sum())
        assert miss <= 0.1 + 1e-9, (p, miss)


def test_twenty_of_twenty_five_is_wide() -> None:
    assert lower_bound(20, 25, 0.9) == pytest.approx(0.6603, abs=1e-4)
    assert upper_bound(20, 25, 0.9) == pytest.approx(0.8994, abs=1e-4)
    assert lower_bound(0, 25, 0.9) == 0.0
    assert upper_bound(25, 25, 0.9) == 1.0


def test_below_min_items_the_accuracy_is_unknown() -> None:
    for right in range(20):
        assert routing_bound(right, 19, 0.9, 20) == 0.0
    assert routing_bound(20, 20, 0.9, 20) == pytest.approx(0.1 ** (1 / 20))


def test_bad_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="right <= n"):
        lower_bound(26, 25, 0.9)
    with pytest.raises(ValueError, match="confidence"):
        lower_bound(1, 2, 1.0)


def test_items_to_decide() -> None:
    assert items_to_decide(95, 100, 0.8, 0.9) == 0  # decided: bound above the floor
    assert items_to_decide(50, 100, 0.8, 0.9) == 0  # decided: upper bound below it
    more = items_to_decide(85, 100, 0.8, 0.9)
    assert more is not None
    assert 10 < more < 200
    assert decides(round(0.85 * (100 + more)), 100 + more, 0.8, 0.9)
    assert not decides(round(0.85 * (99 + more)), 99 + more, 0.8, 0.9)
    assert items_to_decide(20, 25, 0.8, 0.9) is None  # measured exactly on the floor


def test_paired_test_needs_evidence_that_a_variant_is_better() -> None:
    assert not better_than_reference(3, 1, 0.9)  # a variant 2 items 'above' is noise
    assert not better_than_reference(0, 0, 0.9)
    assert better_than_reference(8, 0, 0.9)


def test_the_wilson_bound_would_be_over_confident_where_clopper_pearson_is_not() -> None:
    """Why floors do not use the Wilson interval the profiler prints: at some true accuracies
    its one-sided 90% lower bound is above the truth far more often than 10% of the time."""
    from scipy.stats import binom

    from profiler.stats import wilson_interval

    n, z90 = 25, 1.2815515655446004
    wilson = np.array([wilson_interval(k, n, z=z90)[0] for k in range(n + 1)])
    exact = np.array([lower_bound(k, n, 0.9) for k in range(n + 1)])
    ks = np.arange(n + 1)
    grid = np.linspace(0.5, 0.95, 91)
    wilson_miss = max(float(binom.pmf(ks, n, p)[wilson > p].sum()) for p in grid)
    exact_miss = max(float(binom.pmf(ks, n, p)[exact > p].sum()) for p in grid)
    assert wilson_miss > 0.15
    assert exact_miss <= 0.1


def _agreement(joint: str, a: float, r: float) -> float:
    """P(the pair's answer agrees with the reference's) for a pair of accuracy `a` beside a
    reference of accuracy `r`, for three ways their errors can go together."""
    if joint == "nested_same_wrong":  # the pair is wrong wherever the reference is, the same way
        return a + (1.0 - r)  # the lower bound a >= g + r - 1 is tight here
    if joint == "disjoint":  # never both wrong
        return a + r - 1.0  # the upper bound a <= g + 1 - r is tight here
    return a * r + 0.3 * (1.0 - a) * (1.0 - r)  # independent; 30% of shared errors agree


@pytest.mark.parametrize("joint", ["nested_same_wrong", "disjoint", "independent"])
@pytest.mark.parametrize(("a", "r"), [(0.75, 0.95), (0.9, 0.95), (0.6, 0.8)])
@pytest.mark.parametrize("checks", [100, 400])
@pytest.mark.parametrize("confidence", [0.9, 0.99])
def test_agreement_bounds_cover_the_true_accuracy_over_simulated_checks(
    joint: str, a: float, r: float, checks: int, confidence: float
) -> None:
    """Over many simulated reference profiles (200 items) and windows of live checks, the
    pair's true accuracy is below the lower bound, and above the upper bound, each no more
    often than 1 - confidence (within three standard errors), including where the bounds are
    tight (docs/accuracy.md "Live checks")."""
    rng = np.random.default_rng(7 + checks)
    draws, ref_n = 20_000, 200
    agreed = rng.binomial(checks, _agreement(joint, a, r), size=draws)
    ref_right = rng.binomial(ref_n, r, size=draws)
    memo: dict[tuple[int, int], tuple[float, float]] = {}
    lows, highs = np.empty(draws), np.empty(draws)
    for i, key in enumerate(zip(agreed.tolist(), ref_right.tolist(), strict=True)):
        if key not in memo:
            memo[key] = agreement_bounds(key[0], checks, key[1], ref_n, confidence)
        lows[i], highs[i] = memo[key]
    alpha = 1.0 - confidence
    slack = 3.0 * math.sqrt(alpha * confidence / draws)
    assert float(np.mean(lows > a)) <= alpha + slack
    assert float(np.mean(highs < a)) <= alpha + slack


def test_the_bounds_are_scipy_stats_numbers_bit_for_bit() -> None:
    """The bounds come from `scipy.special` (a cheaper import); they are the numbers
    `scipy.stats`' beta quantiles and binomial tail give, exactly, not within a tolerance."""
    from scipy.stats import beta, binom

    grid = np.array(
        [
            (right, n, confidence)
            for n in range(1, 121)
            for right in range(n + 1)
            for confidence in (0.5, 0.8, 0.9, 0.95, 0.99, 1 - 0.05 / 3)
        ]
    )
    right, n, confidence = grid.T
    with np.errstate(invalid="ignore"):  # the quantile at a zero shape: replaced below
        low = np.where(right == 0, 0.0, beta.ppf(1 - confidence, right, n - right + 1))
        high = np.where(right == n, 1.0, beta.ppf(confidence, right + 1, n - right))
    for (r, total, c), expected_low, expected_high in zip(grid, low, high, strict=True):
        got = (lower_bound(int(r), int(total), c), upper_bound(int(r), int(total), c))
        assert got == (expected_low, expected_high), (r, total, c)
    for discordant in range(1, 121):
        gains = np.arange(discordant + 1)
        p_values = binom.sf(gains - 1, discordant, 0.5)
        for confidence_level in (0.8, 0.9, 0.95):
            expected = list(p_values < 1 - confidence_level)
            verdicts = [
                better_than_reference(int(g), discordant - int(g), confidence_level) for g in gains
            ]
            assert verdicts == expected, (discordant, confidence_level)


def test_importing_the_bounds_does_not_import_scipy_stats() -> None:
    """Every control-plane and profiler process imports this module; `scipy.stats` cost each
    about 0.6 CPU-s more to import than `scipy.special` (docs/style.md, "Tests")."""
    code = "import sys, contracts.accuracy_bound; print('scipy.stats' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "False"
