"""Accuracy drift: what live agreement with the reference pair says about a pair's accuracy.

PURE. Data planes re-ask a sample of a lower-precision pair's answers on its family's
reference pair, in the categories whose scorer decides an answer, and count agreements per
pair and category (`contracts.latency_feedback.AgreementCell`). `agreement_bounds` turns the
counts and the reference's profile counts into bounds on the pair's accuracy that hold whatever
the two pairs' errors have in common (docs/accuracy.md "Live checks").

A pair drifts in a category when, with at least `min_checks` checks, the upper bound is below
the bound its profile gave: the live evidence contradicts the table. What else could explain
that observation: live requests of the category unlike the eval items (a new kind of prompt the
pair handles worse, but so might the reference), or a reference that got worse (then the pair
is blamed for the reference's errors: the bounds count the reference's profile accuracy, not
its live one).

A demotion in force is lifted only on evidence that supports the profile, not on evidence that
merely stops contradicting it (docs/accuracy.md "Demote and lift: hysteresis"). Both rules
compare the live agreement with one threshold, `expected` = bound + r_low - 1, the least
agreement a pair at its profile bound can show whatever its errors share with the
reference's: demote when the agreement's upper confidence bound is below it, lift when its
lower confidence bound is at or above it, with `min_checks` fresh checks of the demoted table.
So one window's checks never both lift and demote (lower <= upper), a pair whose agreement
is below the threshold is lifted at a look with probability at most (1 - confidence)/2, and
a lift proves the pair's accuracy at least bound - (1 - r) - (1 - r_low): a pair degraded by
more than the reference's error band stays demoted. The lift's checks come from the data
planes' probes of the demoted pair on requests other pairs answered (the demotion took its
own traffic). What else could explain checks that support the profile: live requests of the
category that changed back (or were never the pair's weakness), which is what a lift assumes
anyway; or a pair inside the band, whose agreement alone cannot tell it from a healthy one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from contracts.accuracy_bound import agreement_bounds, lower_bound, upper_bound
from contracts.latency_feedback import LatencyFeedback
from contracts.policy import AccuracyCheckPolicy
from contracts.routing_table import PairEntry, RoutingTable


@dataclass(frozen=True, slots=True)
class PairAgreement:
    pair: str
    category: str
    checks: int
    agreed: int
    upper: float  # upper confidence bound of the agreement
    lower: float  # lower confidence bound of the agreement (what a lift needs at `expected`)
    expected: float  # the least agreement the profile's bound implies (bound + r_low - 1)
    accuracy_lower: float  # lower bound of the pair's accuracy, from this evidence
    accuracy_upper: float  # upper bound of the pair's accuracy, from this evidence
    profile_bound: float  # what the profiles say (before any demotion in force)
    implied: float  # agreement / reference accuracy: the point estimate, for reading
    demoted: bool  # a demotion of this pair and category is in force

    @property
    def ratio(self) -> float:
        return self.agreed / self.checks


def reference_of(table: RoutingTable, family: str) -> PairEntry | None:
    """The pair a family's answers are re-asked on: the table's baseline of the family, else
    its most precise pair (precision rank 0), as the data plane compiles it."""
    named = table.baselines.get(family)
    if named is not None:
        return table.entry(named)
    members = [e for e in table.entries if e.family == family]
    return min(members, key=lambda e: e.precision_rank) if members else None


def counts(entry: PairEntry, category: str) -> tuple[int, int] | None:
    """(right, n) of the entry's profile in `category`; None when it was not measured."""
    n = entry.accuracy_n.get(category, 0)
    if n < 1:
        return None
    accuracy = entry.accuracy.get(category, 0.0)
    return min(n, entry.accuracy_right.get(category, round(accuracy * n))), n


def profile_bound(table: RoutingTable, entry: PairEntry, category: str) -> float:
    """The number the profiles gave floors to compare with (a demotion in force keeps it)."""
    demotion = table.demotions.get(entry.pair, {}).get(category)
    if demotion is not None:
        kept = demotion.profile_bound
        return demotion.profile_accuracy if kept is None else kept
    if entry.accuracy_bound:
        return entry.accuracy_bound.get(category, 0.0)
    return entry.accuracy.get(category, 0.0)


def _merged_counts(
    reports: Iterable[LatencyFeedback], version: int
) -> dict[tuple[str, str], tuple[int, int]]:
    found: dict[tuple[str, str], tuple[int, int]] = {}
    for report in reports:
        if report.table_version != version:
            continue
        for cell in report.agreement:
            checks, agreed = found.get((cell.pair, cell.category), (0, 0))
            found[(cell.pair, cell.category)] = (checks + cell.checks, agreed + cell.agreed)
    return found


def merge_agreement(
    reports: Iterable[LatencyFeedback], table: RoutingTable, confidence: float
) -> list[PairAgreement]:
    """Agreement per (pair, category) over the reports about `table` (others are ignored),
    with its bounds at `confidence`."""
    result = []
    for (pair, category), (checks, agreed) in sorted(
        _merged_counts(reports, table.version).items()
    ):
        entry = table.entry(pair)
        reference = reference_of(table, entry.family) if entry else None
        ref_counts = counts(reference, category) if reference else None
        if entry is None or ref_counts is None or checks < 1:
            continue
        agreed = min(agreed, checks)
        low, high = agreement_bounds(agreed, checks, *ref_counts, confidence)
        each = 1.0 - (1.0 - confidence) / 2.0
        bound = profile_bound(table, entry, category)
        r_low = lower_bound(*ref_counts, each)
        r_accuracy = ref_counts[0] / ref_counts[1]
        implied = agreed / checks / r_accuracy if r_accuracy > 0 else 0.0
        result.append(
            PairAgreement(
                pair=pair,
                category=category,
                checks=checks,
                agreed=agreed,
                upper=upper_bound(agreed, checks, each),
                lower=lower_bound(agreed, checks, each),
                expected=max(0.0, bound + r_low - 1.0),
                accuracy_lower=low,
                accuracy_upper=high,
                profile_bound=bound,
                implied=min(1.0, implied),
                demoted=category in table.demotions.get(pair, {}),
            )
        )
    return result


def drifting(a: PairAgreement, policy: AccuracyCheckPolicy) -> bool:
    """The live evidence contradicts the profile's bound (at the policy's confidence): the
    band's upper end is below it, i.e. the agreement's upper bound is below `expected`."""
    return a.checks >= policy.min_checks and a.accuracy_upper < a.profile_bound


def supporting(a: PairAgreement, policy: AccuracyCheckPolicy) -> bool:
    """The live evidence supports the profile's bound as far as agreement can: the
    agreement's lower bound is at or above `expected` (the band's lower end at or above the
    bound minus 2(1 - r_low)). Never true of the checks `drifting` is true of."""
    return a.checks >= policy.min_checks and a.lower >= a.expected


class DemotionEvidence(Protocol):
    """What a demotion keeps and publishes, from agreement or canary evidence."""

    @property
    def pair(self) -> str: ...
    @property
    def category(self) -> str: ...
    @property
    def checks(self) -> int: ...
    @property
    def agreed(self) -> int: ...
    @property
    def accuracy_lower(self) -> float: ...
    @property
    def implied(self) -> float: ...


@dataclass(frozen=True, slots=True)
class DemotionPlan:
    demote: tuple[DemotionEvidence, ...]  # drifting, not yet demoted
    lift: tuple[DemotionEvidence, ...]  # demoted, and as many fresh checks support the profile
    source: str = "live agreement"  # what the evidence is, for the table's note

    def __bool__(self) -> bool:
        return bool(self.demote or self.lift)


def plan_demotions(
    agreements: Iterable[PairAgreement], policy: AccuracyCheckPolicy
) -> DemotionPlan:
    """Demote the drifting pairs not demoted yet, lift the demoted ones whose fresh checks
    support their profile; a demoted pair between the two stays demoted (hysteresis)."""
    demote, lift = [], []
    for a in agreements:
        if a.demoted and supporting(a, policy):
            lift.append(a)
        elif not a.demoted and drifting(a, policy):
            demote.append(a)
    return DemotionPlan(tuple(demote), tuple(lift))
