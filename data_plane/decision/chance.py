"""Best effort's model: the chance that a pair meets the whole request (docs/accuracy.md,
"Best effort: the chance of meeting the request"; docs/data_plane.md, "Best effort").

PURE. P(meet) = P(true accuracy >= every floor) x P(latency within the budget):

- accuracy: the Beta(right + 1, n - right + 1) posterior of the pair's counts (uniform prior),
  capped, as its bound is, by each more precise pair of its family the table did not show it
  beats; below `min_eval_items` it is unknown and meets no positive floor (0). Tabulated per
  pair and category at table compile time (`accuracy_tails`), on a grid of 1,001 floors, so
  a decision only interpolates. Categories multiply (their eval items are independent).
- latency: log-normal around the prediction. The prediction is the table's q-quantile line
  (widened by its fit error); the profile's p50 and p95 give the spread of ln(latency)
  (`LatencyModel.ttft_log_spread`, `tpot_log_spread`), so P(latency <= B) =
  Phi(z_q + ln(B / predicted) / spread). TTFT and the decode time are taken as moving
  together (one spread, weighted by their shares of the prediction); with a TTFT budget
  too, the smaller chance counts. A spread of 0 (a table without it) makes the prediction
  exact: 1 within the budget, 0 beyond.
- the two are independent: which items a pair gets right does not depend on its queue.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence

import numpy as np

from contracts.accuracy_posterior import Floats, posterior_tail
from contracts.routing_table import PairEntry
from data_plane.domain import Candidate, CompiledPair, SloChance

GRID = 1000  # tails are tabulated at floors 0, 1/GRID, ..., 1
_FLOORS = np.linspace(0.0, 1.0, GRID + 1)
_SQRT2 = math.sqrt(2.0)
UNKNOWN: Sequence[float] = array("d", [1.0] + [0.0] * GRID)  # meets no positive floor


def _counts(entry: PairEntry, category: str) -> tuple[int, int]:
    n = entry.accuracy_n[category]
    right = entry.accuracy_right.get(category)
    return (round(entry.accuracy[category] * n) if right is None else right), n


def accuracy_tails(
    entries: Sequence[PairEntry], min_items: int
) -> dict[str, dict[str, Sequence[float]]]:
    """pair -> category -> P(true accuracy >= k / GRID) for k = 0..GRID.

    A pair's own posterior, elementwise capped by the tail of every more precise pair of its
    family whose bound in the category is at least this pair's (the control plane's cap left
    this pair's bound at or below theirs, so the table did not show it better than them;
    a more precise pair with a lower bound was beaten in a paired test and caps nothing)."""
    tails: dict[str, dict[str, Floats]] = {}
    for e in sorted(entries, key=lambda e: e.precision_rank):
        own: dict[str, Floats] = {}
        for category in e.accuracy:
            right, n = _counts(e, category)
            tail = np.array(UNKNOWN) if n < min_items else posterior_tail(right, n, _FLOORS)
            mine = e.accuracy_bound.get(category, e.accuracy[category])
            for m in entries:
                if m.family != e.family or m.precision_rank >= e.precision_rank:
                    continue
                theirs = tails.get(m.pair, {}).get(category)
                if theirs is not None and m.accuracy_bound.get(category, -1.0) >= mine:
                    tail = np.minimum(tail, theirs)
            own[category] = tail
        tails[e.pair] = own
    # array('d'): a decision reads two numbers, faster from it than from numpy
    return {
        pair: {c: array("d", t.tobytes()) for c, t in by_category.items()}
        for pair, by_category in tails.items()
    }


def tail_at(tail: Sequence[float], floor: float) -> float:
    """P(true accuracy >= floor) from a tabulated tail (linear between grid points)."""
    if floor <= 0.0:
        return 1.0
    x = min(floor, 1.0) * GRID
    i = int(x)
    if i >= GRID:
        return tail[GRID]
    return tail[i] + (x - i) * (tail[i + 1] - tail[i])


def p_accuracy(pair: CompiledPair, floors: Sequence[tuple[str, float]]) -> float:
    """P(the pair's true accuracy meets every (category, floor)); an unmeasured category 0."""
    p = 1.0
    for category, floor in floors:
        p *= tail_at(pair.accuracy_tail.get(category, UNKNOWN), floor)
    return p


def _within(z: float, predicted_s: float, budget_s: float, spread: float) -> float:
    """P(X <= budget) for a log-normal X whose z-quantile is `predicted_s`."""
    if spread <= 0.0 or predicted_s <= 0.0:
        return 1.0 if predicted_s <= budget_s else 0.0
    if budget_s <= 0.0:
        return 0.0
    x = z + math.log(budget_s / predicted_s) / spread
    return 0.5 * (1.0 + math.erf(x / _SQRT2))


def p_latency(c: Candidate, latency_s: float | None, ttft_s: float | None) -> float:
    """P(the answer comes within the latency budget, and its first token within the TTFT
    budget); 1 without budgets."""
    pair = c.pair
    p = 1.0
    if latency_s is not None:
        total, first = c.predicted_latency_s, c.predicted_ttft_s
        spread = (
            (first * pair.ttft_log_spread + (total - first) * pair.tpot_log_spread) / total
            if total > 0.0
            else 0.0
        )
        p = _within(pair.latency_z, total, latency_s, spread)
    if ttft_s is not None:
        first_p = _within(pair.latency_z, c.predicted_ttft_s, ttft_s, pair.ttft_log_spread)
        p = min(p, first_p)
    return p


def slo_chance(
    c: Candidate,
    floors: Sequence[tuple[str, float]],
    budgets: tuple[float | None, float | None],
    proven: tuple[bool, bool],
) -> SloChance:
    """The chance for candidate `c` under (category, floor)s and (latency, TTFT) budgets;
    `proven` says whether the table proves (floor, latency) for it."""
    return SloChance(
        p_accuracy=p_accuracy(c.pair, floors),
        p_latency=p_latency(c, *budgets),
        floor_proven=proven[0],
        latency_proven=proven[1],
    )
