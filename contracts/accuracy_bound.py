"""What an accuracy floor means: one-sided exact (Clopper-Pearson) confidence bounds.

Shared by the control plane (it computes the bound every table entry routes on) and the
profiler (it says which pairs a floor leaves undecided and how many more items would decide
them), so both speak of the same number. PURE: scipy's beta quantiles, no I/O.
From `scipy.special` (the functions scipy.stats' `beta.ppf` and `binom.sf` give the same
numbers from, bit for bit: tests/unit/test_accuracy_bound.py), not `scipy.stats`, whose import
cost every control-plane and profiler process about 0.6 CPU-s more.
See docs/accuracy.md for the reasoning in plain words.

A pair that answered `right` of `n` items has true accuracy at least
`lower_bound(right, n, confidence)` with probability >= `confidence` over the choice of eval
items, whatever its true accuracy is (the bound is exact, never anti-conservative).
"""

from __future__ import annotations

import math

from scipy.special import betainc, betaincinv

from contracts.policy import DEFAULT_FLOOR_CONFIDENCE as DEFAULT_FLOOR_CONFIDENCE
from contracts.policy import DEFAULT_MIN_EVAL_ITEMS as DEFAULT_MIN_EVAL_ITEMS


def _check(right: int, n: int, confidence: float) -> None:
    if n < 1 or not 0 <= right <= n:
        raise ValueError(f"need 0 <= right <= n and n >= 1, got {right}/{n}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")


def lower_bound(right: int, n: int, confidence: float) -> float:
    """One-sided Clopper-Pearson lower bound: P(true accuracy >= bound) >= confidence.

    >>> round(lower_bound(20, 25, 0.90), 2)
    0.66
    """
    _check(right, n, confidence)
    if right == 0:
        return 0.0
    return float(betaincinv(right, n - right + 1, 1.0 - confidence))


def upper_bound(right: int, n: int, confidence: float) -> float:
    """One-sided Clopper-Pearson upper bound: P(true accuracy <= bound) >= confidence."""
    _check(right, n, confidence)
    if right == n:
        return 1.0
    return float(betaincinv(right + 1, n - right, confidence))


def routing_bound(right: int, n: int, confidence: float, min_items: int) -> float:
    """The number a floor is compared with: the lower bound, or 0.0 (accuracy unknown, so
    no positive floor is met) when fewer than `min_items` items were measured."""
    if n < min_items:
        return 0.0
    return lower_bound(right, n, confidence)


def per_look(confidence: float, looks: int) -> float:
    """The confidence each of `looks` planned looks at the counts must use for the final
    bound to hold at `confidence` (Bonferroni over the looks: optional stopping)."""
    return 1.0 - (1.0 - confidence) / looks


def decides(right: int, n: int, floor: float, confidence: float) -> bool:
    """True when the data settle `floor` at `confidence`: the lower bound meets it, or the
    upper bound is below it. Otherwise the interval straddles the floor (undecided)."""
    return lower_bound(right, n, confidence) >= floor or upper_bound(right, n, confidence) < floor


def items_to_decide(
    right: int, n: int, floor: float, confidence: float, limit: int = 100_000
) -> int | None:
    """Roughly how many more items would decide `floor`, assuming further items score at the
    accuracy measured so far (right/n); 0 when already decided, None when not within `limit`
    items in all (the measured accuracy sits on the floor itself)."""
    if decides(right, n, floor, confidence):
        return 0
    p = right / n

    def settled(total: int) -> bool:
        return decides(round(p * total), total, floor, confidence)

    low, high = n, n
    while not settled(high):
        if high >= limit:
            return None
        low, high = high, min(limit, high * 2)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if settled(mid) else (mid, high)
    return high - n


def better_than_reference(gains: int, losses: int, confidence: float) -> bool:
    """Exact one-sided McNemar test on paired items: a variant right where its reference was
    wrong on `gains` items and wrong where the reference was right on `losses` items is
    better than its reference at `confidence` (under 'not better', each discordant item is a
    fair coin at worst)."""
    discordant = gains + losses
    if discordant == 0:
        return False
    # P(X >= gains) for X ~ Binomial(discordant, 1/2): the regularized incomplete beta function
    # I_{1/2}(gains, losses + 1) for gains >= 1, and 1 for no gains.
    p_value = 1.0 if gains == 0 else float(betainc(gains, losses + 1, 0.5))
    return p_value < 1.0 - confidence and not math.isnan(p_value)


def agreement_bounds(
    agreed: int, checks: int, reference_right: int, reference_n: int, confidence: float
) -> tuple[float, float]:
    """(lower, upper): what `agreed` of `checks` live comparisons with the family's reference
    pair, whose profile answered `reference_right` of `reference_n` items, say about a pair's
    accuracy `a`, each holding with probability >= `confidence` (docs/accuracy.md "Live
    checks"). No assumption about how the two pairs' errors go together:

    - both right => they agree, so agreement g >= P(both right) >= a + r - 1: a <= g + 1 - r;
    - they agree only when both are right or the reference is wrong: g <= a + (1 - r):
      a >= g + r - 1.

    g and r enter through one-sided Clopper-Pearson bounds, each at 1 - (1 - confidence)/2
    (Bonferroni), so either end of the pair fails at most 1 - confidence of the time.

    >>> [round(x, 3) for x in agreement_bounds(70, 100, 380, 400, 0.99)]
    [0.484, 0.896]
    """
    _check(agreed, checks, confidence)
    _check(reference_right, reference_n, confidence)
    each = 1.0 - (1.0 - confidence) / 2.0
    r_low = lower_bound(reference_right, reference_n, each)
    lower = lower_bound(agreed, checks, each) + r_low - 1.0
    upper = upper_bound(agreed, checks, each) + 1.0 - r_low
    return max(0.0, lower), min(1.0, upper)
