"""The recent traffic mix (`--traffic FILE`): which undecided categories would move traffic,
for the summary and for the order `--until-decided --item-budget` spends items in
(docs/profiler.md, docs/accuracy.md "Evidence where it moves traffic").

FILE is what the control plane's `GET /v1/evidence` answers (its `mix` and `window_s`). The
ranking is `contracts.evidence`'s, on this pair's own counts: the bound here is the profiler's
(at the planned looks), without the family cap the table may add, so a pair capped by a more
precise one can rank higher here than on the control plane's page.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from pydantic import TypeAdapter, ValidationError

from contracts.accuracy_bound import per_look, routing_bound
from contracts.evidence import EvidenceRow, PairAccuracy, evidence_row, rank_key
from contracts.latency_feedback import MixCell
from contracts.profile_report import Prices, ProfileReport
from profiler.errors import InputError
from profiler.evals.decisions import DecisionTarget

_CELLS = TypeAdapter(tuple[MixCell, ...])


@dataclass(frozen=True, slots=True)
class Traffic:
    mix: tuple[MixCell, ...]
    window_s: float


def load_traffic(path: Path) -> Traffic:
    """The mix in `path` (the body of `GET /v1/evidence`); InputError says what is wrong."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise InputError([f"--traffic {path}: cannot read: {err.strerror}"]) from err
    except ValueError as err:
        raise InputError([f"--traffic {path}: not JSON: {err}"]) from err
    if not isinstance(data, dict) or "mix" not in data or "window_s" not in data:
        raise InputError([f"--traffic {path}: expected the body of GET /v1/evidence"])
    try:
        mix = _CELLS.validate_python(data["mix"])
        window_s = float(data["window_s"])
    except (ValidationError, TypeError, ValueError) as err:
        raise InputError([f"--traffic {path}: mix: {err}"]) from err
    if window_s <= 0:
        raise InputError([f"--traffic {path}: window_s must be positive"])
    return Traffic(mix, window_s)


def pair_accuracy(
    pair: str, category: str, right: int, n: int, prices: Prices | None, target: DecisionTarget
) -> PairAccuracy:
    """This pair's counts in one category, bounded as the table would (without the cap)."""
    confidence = per_look(target.confidence, target.looks)
    bound = routing_bound(right, n, confidence, target.min_items) if n else 0.0
    return PairAccuracy(
        pair=pair,
        category=category,
        right=right,
        n=n,
        bound=min(bound, right / n) if n else 0.0,
        input_usd_per_mtok=None if prices is None else prices.input_usd_per_mtok,
        output_usd_per_mtok=None if prices is None else prices.output_usd_per_mtok,
        looks=target.looks,
    )


def ranked_rows(
    accuracies: Sequence[PairAccuracy], traffic: Traffic, target: DecisionTarget
) -> list[EvidenceRow]:
    """The undecided rows of `accuracies` against the mix's floors, most moving first."""
    rows = [
        row
        for a in accuracies
        if (
            row := evidence_row(
                a, traffic.mix, 0.0, target.confidence, target.min_items, traffic.window_s
            )
        )
        is not None
    ]
    return sorted(rows, key=rank_key)


def category_order(
    pair: str,
    counts: Mapping[str, tuple[int, int]],
    prices: Prices | None,
    traffic: Traffic,
    target: DecisionTarget,
) -> list[str]:
    """Categories of `counts` (category -> (right, n)) in the order more items should go:
    those whose deciding moves the most dollars (then traffic) first, the rest after."""
    accuracies = [
        pair_accuracy(pair, c, right, n, prices, target) for c, (right, n) in counts.items()
    ]
    ranked = [r.category for r in ranked_rows(accuracies, traffic, target)]
    return ranked + [c for c in counts if c not in ranked]


def render_evidence(
    reports: Sequence[ProfileReport], traffic: Traffic, target: DecisionTarget
) -> str:
    """The summary's section: undecided (pair, category) by the traffic deciding them moves."""
    accuracies = [
        pair_accuracy(
            r.pair, a.category, a.right_count, a.n, r.prices, replace(target, looks=a.looks)
        )
        for r in reports
        for a in r.accuracy
    ]
    rows = ranked_rows(accuracies, traffic, target)
    total = sum(c.requests for c in traffic.mix)
    head = f"Evidence where it moves traffic ({total} requests over {traffic.window_s:.0f} s)"
    if not rows:
        return f"{head}: no pair is undecided against a floor of the mix.\n"
    lines = [f"{head}: deciding in the pair's favour would move"]
    for r in rows:
        usd = "no price" if r.usd_per_day is None else f"{r.usd_per_day:+.2f} $/day"
        more = "over 100,000" if r.items_needed is None else f"~{r.items_needed}"
        floors = ", ".join(f"{f:.2f}" for f in r.floors)
        lines.append(
            f"  {r.category:<11} {r.pair:<40} {r.right}/{r.n} floors {floors}: "
            f"{r.share_moved:.1%} of traffic, {usd}, {more} more items"
            f"{'' if r.likely_pass else ' (likely to decide against it)'}"
        )
    return "\n".join(lines) + "\n"
