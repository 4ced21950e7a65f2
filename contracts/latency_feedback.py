"""Latency feedback: what each data plane observed against the predictions it routed on.

Written by data planes at an interval (a bounded summary, never per request) to the Redis
stream `RedisKeys.feedback`, merged by the control plane, which refits the table when the
observed latency at the table's quantile drifts from the prediction (docs/control_plane.md
"Latency feedback"). Observations are ratios observed / predicted, kept per pair, load
bucket and size bucket in fixed log-spaced histograms, so a report's size does not grow with
traffic.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

STEPS_PER_OCTAVE = 8  # bucket width: a factor 2^(1/8) ~ 1.09
MIN_EXPONENT = -4 * STEPS_PER_OCTAVE  # ratios below 1/16 land in bucket 0
RATIO_BUCKETS = 10 * STEPS_PER_OCTAVE  # up to 64x; above lands in the last bucket
LOAD_BUCKETS = 7  # loads 1, 2-3, 4-7, ..., 32-63, 64+
SIZE_BUCKETS = 6  # prompt + completion tokens 0-63, 64-255, ..., 4096-16383, 16384+
MAX_CELLS = 4096  # pairs x load buckets x size buckets per report


class _Contract(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


def ratio_bucket(ratio: float) -> int:
    """The histogram bucket of an observed / predicted ratio (clamped to the ends)."""
    if not ratio > 0.0 or math.isinf(ratio):
        return 0 if not ratio > 0.0 else RATIO_BUCKETS - 1
    index = math.floor(math.log2(ratio) * STEPS_PER_OCTAVE) - MIN_EXPONENT
    return min(max(index, 0), RATIO_BUCKETS - 1)


def bucket_ratio(index: int) -> float:
    """The geometric middle of bucket `index` (what a quantile falling in it reads as)."""
    return float(2.0 ** ((index + MIN_EXPONENT + 0.5) / STEPS_PER_OCTAVE))


def load_bucket(load: float) -> int:
    """0 for load <= 1, then one bucket per doubling (2-3, 4-7, ...), the last open-ended."""
    if load < 2.0:
        return 0
    return min(int(math.log2(load)), LOAD_BUCKETS - 1)


def size_bucket(tokens: int) -> int:
    """The size bucket of an answer by the tokens its engine reported (prompt + completion):
    one bucket per factor 4 from 64 (0-63, 64-255, ...), the last open-ended. A long prompt
    and a long answer both land in a larger bucket than a short chat turn."""
    if tokens < 64:
        return 0
    return min(int(math.log2(tokens) // 2) - 2, SIZE_BUCKETS - 1)


class RatioHistogram(_Contract):
    """Counts of observed / predicted ratios: bucket index -> count (absent = 0)."""

    counts: dict[int, int] = Field(default_factory=dict)

    @property
    def n(self) -> int:
        return sum(self.counts.values())

    def quantile(self, q: float) -> float | None:
        """The ratio at quantile `q` (bucket middle, within a factor 1.05); None when empty."""
        total = self.n
        if total == 0:
            return None
        rank = q * total
        seen = 0
        for index in sorted(self.counts):
            seen += self.counts[index]
            if seen >= rank:
                return bucket_ratio(index)
        return bucket_ratio(max(self.counts))


def merge_histograms(histograms: Iterable[RatioHistogram]) -> RatioHistogram:
    counts: dict[int, int] = {}
    for h in histograms:
        for index, count in h.counts.items():
            counts[index] = counts.get(index, 0) + count
    return RatioHistogram(counts=counts)


class PairLoadFeedback(_Contract):
    """One pair at one load and size bucket: observed / predicted ratios of the answers it
    served, each against the prediction for the tokens its engine reported in `usage` (prompt
    and completion) at the load the request met.

    `ttft` and `tpot` come from streams only (a non-streamed answer shows no first token);
    `e2e` from every answer. `budget_met` / `budget_missed` count the answers with a latency
    budget (the refit watch compares them before and after a refit). Added fields default to
    what an older writer meant: one size bucket, no budget counts.
    """

    pair: str = Field(min_length=1, max_length=200)
    load_bucket: int = Field(ge=0, lt=LOAD_BUCKETS)
    size_bucket: int = Field(default=0, ge=0, lt=SIZE_BUCKETS)
    ttft: RatioHistogram = RatioHistogram()
    tpot: RatioHistogram = RatioHistogram()
    e2e: RatioHistogram = RatioHistogram()
    budget_met: int = Field(default=0, ge=0)
    budget_missed: int = Field(default=0, ge=0)


class AgreementCell(_Contract):
    """Shadow re-asks of one pair's answers in one category on its family's reference pair."""

    pair: str = Field(min_length=1, max_length=200)
    category: str = Field(min_length=1, max_length=64)
    checks: int = Field(ge=1)
    agreed: int = Field(ge=0)


class CanaryCell(_Contract):
    """Canary items of one pair in one category: held-out eval items with known answers, sent
    to the pair and scored by the category's scorer (docs/accuracy.md "Canary items"). The
    evidence accuracy demotions and lifts are decided on."""

    pair: str = Field(min_length=1, max_length=200)
    category: str = Field(min_length=1, max_length=64)
    n: int = Field(ge=1, description="items scored (answered and scored)")
    right: int = Field(ge=0, description="of them, scored right")


class MixCell(_Contract):
    """Decisions of one window in one cell of the traffic mix: the category routed under,
    the floor the request had there (rounded to 0.01), and the pair chosen first. `proven`
    counts those decided under the table's guarantee (floor and budget proven); tokens and
    cost are the decision's estimates for the chosen pair (docs/accuracy.md, "Evidence where
    it moves traffic")."""

    category: str = Field(min_length=1, max_length=64)
    floor: float = Field(ge=0.0, le=1.0)
    pair: str = Field(min_length=1, max_length=200)
    requests: int = Field(ge=1)
    proven: int = Field(default=0, ge=0)
    input_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)
    cost_usd: float = Field(default=0.0, ge=0.0)


class LatencyFeedback(_Contract):
    """One data plane's observations over [window_start, window_end) for one table version."""

    schema_version: str = "1.0"
    kind: Literal["LatencyFeedback"] = "LatencyFeedback"
    instance: str = Field(min_length=1, max_length=200)
    table_version: int = Field(ge=0)
    window_start: datetime
    window_end: datetime
    cells: tuple[PairLoadFeedback, ...] = Field(default=(), max_length=MAX_CELLS)
    agreement: tuple[AgreementCell, ...] = Field(default=(), max_length=MAX_CELLS)
    canary: tuple[CanaryCell, ...] = Field(default=(), max_length=MAX_CELLS)
    mix: tuple[MixCell, ...] = Field(default=(), max_length=MAX_CELLS)
