"""Small statistics over measured samples (pure)."""

from __future__ import annotations

import math
from collections.abc import Sequence


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank quantile of already sorted values; NaN for an empty sample."""
    if not sorted_values:
        return math.nan
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile {q} is outside [0, 1]")
    rank = max(1, math.ceil(q * len(sorted_values)))
    return float(sorted_values[rank - 1])


def ratio(value: float, baseline: float) -> float:
    """value / baseline, NaN when the baseline is zero or missing."""
    if baseline == 0 or math.isnan(baseline) or math.isnan(value):
        return math.nan
    return value / baseline


def median_low(values: Sequence[float]) -> float:
    """The median of an odd count, the lower middle value of an even one (always a measured
    value: with three runs, the one in the middle); NaN for an empty sample."""
    ordered = sorted(values)
    return float(ordered[(len(ordered) - 1) // 2]) if ordered else math.nan
