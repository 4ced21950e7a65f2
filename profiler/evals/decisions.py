"""How much data a routing decision needs: which pairs the floors leave undecided, and roughly
how many more labelled items would decide them (docs/accuracy.md).

PURE (scipy through `contracts.accuracy_bound`). A pair is *undecided* against floor f in a
category when its interval straddles f: the one-sided lower bound at the confidence is below
f and the one-sided upper bound is not. Fewer than `min_items` items are undecided for every
positive floor (the table treats such accuracy as unknown).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from contracts.accuracy_bound import (
    DEFAULT_FLOOR_CONFIDENCE,
    DEFAULT_MIN_EVAL_ITEMS,
    items_to_decide,
    lower_bound,
    per_look,
    upper_bound,
)
from contracts.profile_report import ProfileReport

DEFAULT_FLOORS = (0.7, 0.8, 0.9)
MAX_LOOKS = 4  # --until-decided looks at the counts at most this many times per category


@dataclass(frozen=True, slots=True)
class DecisionTarget:
    """The floors to decide and how sure to be (the policy's floor_confidence and
    min_eval_items); `looks` > 1 when the counts are looked at repeatedly (`--until-decided`)."""

    floors: tuple[float, ...] = DEFAULT_FLOORS
    confidence: float = DEFAULT_FLOOR_CONFIDENCE
    min_items: int = DEFAULT_MIN_EVAL_ITEMS
    looks: int = 1

    @property
    def per_look(self) -> float:
        return per_look(self.confidence, self.looks)


@dataclass(frozen=True, slots=True)
class Undecided:
    """One pair whose interval straddles a floor in one category. `more` is roughly how many
    more items would decide it (None: not within 100,000, measured on the floor itself)."""

    pair: str
    category: str
    right: int
    n: int
    low: float
    high: float
    floor: float
    more: int | None


def undecided_counts(
    pair: str, category: str, right: int, n: int, target: DecisionTarget, looks: int = 1
) -> list[Undecided]:
    """The floors of `target` that `right` of `n` leaves undecided."""
    confidence = per_look(target.confidence, max(looks, target.looks))
    low, high = lower_bound(right, n, confidence), upper_bound(right, n, confidence)
    out = []
    for floor in target.floors:
        if floor <= 0.0:
            continue
        if n < target.min_items:
            more: int | None = max(
                target.min_items - n, items_to_decide(right, n, floor, confidence) or 0
            )
        elif low >= floor or high < floor:
            continue
        else:
            more = items_to_decide(right, n, floor, confidence)
        out.append(Undecided(pair, category, right, n, low, high, floor, more))
    return out


def undecided(reports: Iterable[ProfileReport], target: DecisionTarget) -> list[Undecided]:
    """Every (pair, category, floor) the reports leave undecided, by category then pair."""
    rows = [
        row
        for report in reports
        for a in report.accuracy
        for row in undecided_counts(report.pair, a.category, a.right_count, a.n, target, a.looks)
    ]
    return sorted(rows, key=lambda r: (r.category, r.pair, r.floor))


def render_undecided(rows: Sequence[Undecided], target: DecisionTarget) -> str:
    """A plain-text section for the terminal: one line per undecided pair and floor."""
    floors = ", ".join(f"{f:.2f}" for f in target.floors)
    head = (
        f"Decisions at {target.confidence:.0%} confidence against floors {floors} "
        f"(min {target.min_items} items)"
    )
    if not rows:
        return f"{head}: every pair is decided in every category.\n"
    lines = [f"{head}: undecided (the interval straddles the floor):"]
    for r in rows:
        more = "more than 100,000 more items" if r.more is None else f"~{r.more} more items"
        lines.append(
            f"  {r.category:<11} {r.pair:<40} {r.right}/{r.n} in [{r.low:.3f}, {r.high:.3f}] "
            f"vs floor {r.floor:.2f}: {more}"
        )
    return "\n".join(lines) + "\n"
