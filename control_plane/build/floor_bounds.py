"""The accuracy bound each table entry routes on, per category (docs/accuracy.md).

PURE (scipy through `contracts.accuracy_bound`). For every pair and measured category:

1. counts (right, n) from the report;
2. below the policy's `min_eval_items` the accuracy is unknown: bound 0.0, so the pair meets
   no positive floor there;
3. otherwise the one-sided Clopper-Pearson lower bound at `floor_confidence` (split among the
   profiler's planned looks when it asked until decided);
4. precision-monotone across the family: a pair's bound is capped at the bound of every more
   precise pair of its family (by declared format) in that category, unless the paired
   same-item comparison (exact McNemar test at the same confidence) shows the pair really
   answers better than that pair. A quantized variant measured above its reference is far
   more likely noise than a gain, and capping only ever lowers a bound, so coverage holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from contracts.accuracy_bound import better_than_reference, per_look, routing_bound
from contracts.policy import Policy
from contracts.profile_report import CategoryAccuracy, ProfileReport
from control_plane.build.precision import precision_of


@dataclass(frozen=True, slots=True)
class Measurement:
    """One pair's accuracy in one category as the table carries it."""

    right: int
    n: int
    accuracy: float
    bound: float


def paired_counts(variant: CategoryAccuracy, reference: CategoryAccuracy) -> tuple[int, int] | None:
    """(gains, losses) of `variant` against `reference` on the items both answered: gains =
    variant right where the reference was wrong; None without per-item outcomes."""
    if variant.items is None or variant.outcomes is None:
        return None
    if reference.items is None or reference.outcomes is None:
        return None
    theirs = dict(zip(reference.items, reference.outcomes, strict=True))
    gains = losses = 0
    for item, mine in zip(variant.items, variant.outcomes, strict=True):
        other = theirs.get(item)
        if other is None or other == mine:
            continue
        if mine == "1":
            gains += 1
        else:
            losses += 1
    return gains, losses


def _direct(report: ProfileReport, policy: Policy) -> dict[str, Measurement]:
    out = {}
    for a in report.accuracy:
        right = a.right_count
        confidence = per_look(policy.floor_confidence, a.looks)
        bound = routing_bound(right, a.n, confidence, policy.min_eval_items)
        out[a.category] = Measurement(right, a.n, a.accuracy, min(bound, a.accuracy))
    return out


def _capped(
    own: Measurement,
    mine: CategoryAccuracy,
    above: Sequence[tuple[CategoryAccuracy, Measurement]],
    confidence: float,
) -> Measurement:
    """`own` with its bound capped by each more precise pair's, unless the paired test shows
    this pair better than that one."""
    bound = own.bound
    for theirs, measured in above:
        if measured.bound >= bound:
            continue
        counts = paired_counts(mine, theirs)
        if counts is not None and better_than_reference(*counts, confidence):
            continue
        bound = measured.bound
    return Measurement(own.right, own.n, own.accuracy, bound)


def _family_bounds(
    members: Sequence[ProfileReport], policy: Policy
) -> dict[str, dict[str, Measurement]]:
    """Bounds of one family's pairs, most precise first, each capped by those above it."""
    overrides = policy.precision_formats
    ordered = sorted(members, key=lambda r: precision_of(r.quantization, overrides), reverse=True)
    result: dict[str, dict[str, Measurement]] = {}
    for report in ordered:
        level = precision_of(report.quantization, overrides)
        above = [r for r in ordered if precision_of(r.quantization, overrides) > level]
        direct = _direct(report, policy)
        capped = {}
        for a in report.accuracy:
            theirs = [
                (b, result[r.pair][a.category])
                for r in above
                for b in r.accuracy
                if b.category == a.category
            ]
            capped[a.category] = _capped(direct[a.category], a, theirs, policy.floor_confidence)
        result[report.pair] = capped
    return result


def floor_bounds(
    reports: Sequence[ProfileReport], policy: Policy
) -> Mapping[str, Mapping[str, Measurement]]:
    """pair -> category -> Measurement, for every report and measured category."""
    by_family: dict[str, list[ProfileReport]] = {}
    for report in reports:
        by_family.setdefault(report.family, []).append(report)
    result: dict[str, dict[str, Measurement]] = {}
    for members in by_family.values():
        result.update(_family_bounds(members, policy))
    return result
