"""Statistics of section 7's engine rows on recorded segment latencies (PURE).

A row alternates segments without and with the hostile input (the tools-heavy clients, the
48 MiB page) in one data plane, each hostile segment right after a clean one. Two readings of
the ordinary clients' latency:
- pooled: every sample of one kind of segment together, its p50 and p99, the number of
  samples behind them and the slowest few. One stall of the whole machine in one segment moves
  the pooled p99 of its kind alone, by as much as the stall lasts.
- paired: each hostile segment's p99 over the clean segment just before it (inclusive: tens of
  samples a segment, so near its slowest), and the median of those ratios with their spread
  (lowest, highest). A stall falls into one pair and moves one
  ratio, so the median reads what the hostile input does to a segment beside its neighbour.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

SLOWEST = 4  # the slowest latencies kept per kind


def p99(
    latencies: Sequence[float], method: Literal["inclusive", "exclusive"] = "exclusive"
) -> float:
    """The 99th percentile (nan with no sample, the one sample with one). "exclusive" is the
    rows' figure of old (`statistics.quantiles`' default): under 100 samples it reaches past
    the greatest one. "inclusive" stays within the samples: under 100, near the greatest."""
    if not latencies:
        return math.nan
    if len(latencies) == 1:
        return latencies[0]
    return statistics.quantiles(latencies, n=100, method=method)[98]


@dataclass(frozen=True, slots=True)
class Pooled:
    """One kind of segment's latencies taken together (ms)."""

    n: int
    p50_ms: float
    p99_ms: float
    slowest_ms: tuple[float, ...]  # the SLOWEST greatest, slowest first


@dataclass(frozen=True, slots=True)
class Paired:
    """Each hostile segment's p99 over its clean neighbour's."""

    ratios: tuple[float, ...]  # in the order the pairs ran

    @property
    def median(self) -> float:
        return statistics.median(self.ratios) if self.ratios else math.nan

    @property
    def low(self) -> float:
        return min(self.ratios, default=math.nan)

    @property
    def high(self) -> float:
        return max(self.ratios, default=math.nan)


def pooled(segments: Sequence[Sequence[float]]) -> Pooled:
    """The latencies (s) of every segment of one kind, pooled."""
    every = [s for segment in segments for s in segment]
    if not every:
        return Pooled(0, math.nan, math.nan, ())
    slowest = tuple(1000 * s for s in sorted(every, reverse=True)[:SLOWEST])
    return Pooled(len(every), 1000 * statistics.median(every), 1000 * p99(every), slowest)


def paired(clean: Sequence[Sequence[float]], hostile: Sequence[Sequence[float]]) -> Paired:
    """Hostile segment i's p99 over clean segment i's (the one that ran just before it), each
    segment's p99 inclusive (a segment holds tens of samples); a pair with an empty segment is
    left out."""
    ratios = tuple(
        p99(h, "inclusive") / p99(c, "inclusive")
        for c, h in zip(clean, hostile, strict=False)
        if c and h and p99(c, "inclusive") > 0
    )
    return Paired(ratios)
