"""Evidence where it moves traffic: which undecided (pair, category) would move the recent mix
if more eval items decided it, and what share of that mix the table can prove today.

Shared by the control plane (`GET /v1/evidence`, the operator page) and the profiler (its
summary and `--until-decided --item-budget`), so both rank the same way (docs/accuracy.md,
"Evidence where it moves traffic"). PURE: the bounds of `contracts.accuracy_bound`, no I/O.

The recent mix is the data planes' decision counts per (category, floor, chosen pair) from
their feedback (`contracts.latency_feedback.MixCell`). A pair P is *undecided* in category c
against floor f when the bound the table routes on is below f but P's own upper bound is not
(or P has fewer than `min_items` items there). Deciding P in its favour makes P eligible for
the mix's requests of c whose floor is among those; it would *move* a cell of them when the
cell was not all served under the guarantee (its requests gain a proven pair, P itself
included) or P is cheaper than the pair that served it on the same estimated tokens.
Dollars per day are the served cost minus P's cost over those cells, scaled from the window
to a day (negative: proven answers would cost more). This is what deciding *in P's favour*
would move, an upper figure: the latency budget is not re-checked, and the items may decide
against P (`likely_pass` says which way today's rate points).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from contracts.accuracy_bound import items_to_decide, per_look, upper_bound
from contracts.latency_feedback import MixCell

DAY_S = 86_400.0


@dataclass(frozen=True, slots=True)
class PairAccuracy:
    """One pair's accuracy in one category: counts, the bound the table routes on, prices."""

    pair: str
    category: str
    right: int
    n: int
    bound: float
    input_usd_per_mtok: float | None  # None: no explicit price (no dollars, no "cheaper")
    output_usd_per_mtok: float | None
    looks: int = 1

    def cost_usd(self, input_tokens: int, output_tokens: int) -> float | None:
        if self.input_usd_per_mtok is None or self.output_usd_per_mtok is None:
            return None
        return (
            input_tokens * self.input_usd_per_mtok + output_tokens * self.output_usd_per_mtok
        ) / 1e6


@dataclass(frozen=True, slots=True)
class EvidenceRow:
    """One undecided (pair, category): the floors it leaves open, the share of the mix and the
    dollars per day deciding it in its favour would move, and the items that would take."""

    pair: str
    category: str
    right: int
    n: int
    bound: float
    upper: float
    floors: tuple[float, ...]
    requests_moved: int
    share_moved: float
    usd_per_day: float | None  # None: the pair has no price to compare
    items_needed: int | None  # None: not within 100,000 items (measured on the floor)
    likely_pass: bool  # today's rate meets the highest floor with traffic


@dataclass(frozen=True, slots=True)
class Evidence:
    """The mix's totals and the undecided rows, most traffic-moving first."""

    requests: int
    window_s: float
    provable_share: float  # some pair's bound meets the request's floor in its category
    decidable_share: float  # some pair's upper bound does: what more eval data could buy
    proven_share: float  # decided under the guarantee (floor and budget) by the data planes
    rows: tuple[EvidenceRow, ...]


def merge_mix(cells: Iterable[MixCell]) -> list[MixCell]:
    """Cells summed over reports (data planes, windows), one per (category, floor, pair)."""
    acc: dict[tuple[str, float, str], list[float]] = {}
    for c in cells:
        row = acc.setdefault((c.category, round(c.floor, 2), c.pair), [0, 0, 0, 0, 0.0])
        for i, v in enumerate((c.requests, c.proven, c.input_tokens, c.output_tokens)):
            row[i] += v
        row[4] += c.cost_usd
    return [
        MixCell(
            category=cat,
            floor=floor,
            pair=pair,
            requests=int(r[0]),
            proven=int(r[1]),
            input_tokens=int(r[2]),
            output_tokens=int(r[3]),
            cost_usd=r[4],
        )
        for (cat, floor, pair), r in sorted(acc.items())
    ]


def _upper(a: PairAccuracy, confidence: float) -> float:
    return upper_bound(a.right, a.n, per_look(confidence, a.looks)) if a.n > 0 else 1.0


def open_floors(
    a: PairAccuracy, floors: Iterable[float], confidence: float, min_items: int
) -> tuple[float, ...]:
    """The positive floors `a` leaves undecided: above its bound, not above its upper bound
    (every floor above its bound while it has fewer than `min_items` items)."""
    high = _upper(a, confidence)
    return tuple(
        sorted(f for f in set(floors) if f > a.bound and (a.n < min_items or f <= high) and f > 0)
    )


def _items(a: PairAccuracy, floor: float, confidence: float, min_items: int) -> int | None:
    conf = per_look(confidence, a.looks)
    if a.n == 0:
        return min_items
    more = items_to_decide(a.right, a.n, floor, conf)
    if a.n < min_items:
        return max(min_items - a.n, more or 0)
    return more


def _moves(a: PairAccuracy, c: MixCell) -> bool:
    """Deciding `a` moves cell `c`: not all of it was proven, or `a` is cheaper for it."""
    mine = a.cost_usd(c.input_tokens, c.output_tokens)
    return c.proven < c.requests or (mine is not None and mine < c.cost_usd)


def evidence_row(
    a: PairAccuracy,
    mix: Sequence[MixCell],
    policy_floor: float,
    confidence: float,
    min_items: int,
    window_s: float,
) -> EvidenceRow | None:
    """`a`'s row, or None when it is decided against every floor its category has."""
    mine = [c for c in mix if c.category == a.category]
    floors = open_floors(a, [policy_floor, *(c.floor for c in mine)], confidence, min_items)
    if not floors:
        return None
    moved = [c for c in mine if c.floor in floors and _moves(a, c)]
    requests = sum(c.requests for c in moved)
    total = sum(c.requests for c in mix)
    costs = [(c.cost_usd, a.cost_usd(c.input_tokens, c.output_tokens)) for c in moved]
    usd = None if a.input_usd_per_mtok is None else sum(s - (m or 0.0) for s, m in costs)
    top = max((c.floor for c in moved), default=max(floors))
    return EvidenceRow(
        pair=a.pair,
        category=a.category,
        right=a.right,
        n=a.n,
        bound=a.bound,
        upper=_upper(a, confidence),
        floors=floors,
        requests_moved=requests,
        share_moved=requests / total if total else 0.0,
        usd_per_day=None if usd is None else usd * DAY_S / window_s if window_s > 0 else 0.0,
        items_needed=_items(a, top, confidence, min_items),
        likely_pass=a.n > 0 and a.right / a.n >= top,
    )


def rank_key(row: EvidenceRow) -> tuple[float, float, int]:
    """Most dollars per day first, then most traffic, then fewest items."""
    items = row.items_needed if row.items_needed is not None else 10**9
    return (-(row.usd_per_day or 0.0), -row.share_moved, items)


def evidence(
    pairs: Sequence[PairAccuracy],
    mix: Sequence[MixCell],
    policy_floors: Mapping[str, float],
    confidence: float,
    min_items: int,
    window_s: float,
) -> Evidence:
    """The provable share of `mix` and every undecided (pair, category), ranked."""
    total = sum(c.requests for c in mix)
    by_category: dict[str, list[PairAccuracy]] = {}
    for a in pairs:
        by_category.setdefault(a.category, []).append(a)
    provable = decidable = 0
    for c in mix:
        mine = by_category.get(c.category, [])
        if c.floor <= 0 or any(a.bound >= c.floor for a in mine):
            provable += c.requests
            decidable += c.requests
        elif any(_upper(a, confidence) >= c.floor or a.n < min_items for a in mine):
            decidable += c.requests
    rows = [
        row
        for a in pairs
        if (
            row := evidence_row(
                a, mix, policy_floors.get(a.category, 0.0), confidence, min_items, window_s
            )
        )
        is not None
    ]
    return Evidence(
        requests=total,
        window_s=window_s,
        provable_share=provable / total if total else 0.0,
        decidable_share=decidable / total if total else 0.0,
        proven_share=sum(c.proven for c in mix) / total if total else 0.0,
        rows=tuple(sorted(rows, key=rank_key)),
    )
