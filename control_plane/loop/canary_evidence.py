"""Canary evidence: what held-out items with known answers say about a pair's accuracy.

PURE. Data planes send canary items (held-out eval items whose answers are known) to each
pair and score the answers with the category's scorer (`contracts.answer_scoring`); each
report counts them per pair and category (`contracts.latency_feedback.CanaryCell`). Unlike
agreement with a reference pair, a canary item is right or wrong on its own: a prompt both
pairs get wrong in different ways says nothing about either, and it never reaches this count.
So the counts are a binomial sample of the pair's accuracy on the eval distribution, the same
distribution its profile was measured on, and Clopper-Pearson bounds on them hold as stated
(docs/accuracy.md "Canary items").

The decision (docs/accuracy.md "Demote and lift"), with `min_checks` items of the table in
force and bounds at `confidence` (two-sided: each one-sided bound at 1 - (1 - confidence)/2;
the upper bound also corrected for the loop's `canary_looks` looks at one window's counts, so
the chance of demoting a healthy pair stays what `confidence` says while the loop keeps
looking):

- demote when the canary's upper bound is below the pair's profile bound: the items
  contradict what the table claims. The demotion publishes the canary's lower bound.
- lift a demotion in force when the canary's point estimate (right / n) on fresh items of the
  demoted table is at or above the profile bound: the same evidence now supports the profile.
  The point estimate at the bound implies the upper bound above it, so one window never both
  demotes and lifts, and a pair between the two stays as it is (hysteresis).

What else could explain a demotion: eval items that no longer match what the pair is asked
(canaries measure the eval distribution, as the profile did), or a scorer change between
profile and canary; both show as every pair of the family moving at once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from contracts.accuracy_bound import lower_bound, per_look, upper_bound
from contracts.latency_feedback import LatencyFeedback
from contracts.policy import AccuracyCheckPolicy
from contracts.routing_table import RoutingTable
from control_plane.loop.accuracy_drift import DemotionPlan, profile_bound


@dataclass(frozen=True, slots=True)
class PairCanary:
    pair: str
    category: str
    n: int  # canary items scored
    right: int  # of them, right
    lower: float  # Clopper-Pearson lower bound of the pair's accuracy (what a demotion publishes)
    upper: float  # Clopper-Pearson upper bound over the looks (a demotion needs it below the
    # profile's bound)
    profile_bound: float  # what the profiles say (kept through a demotion in force)
    demoted: bool  # a demotion of this pair and category is in force

    # The names a demotion record keeps (`contracts.routing_table.Demotion`).
    @property
    def checks(self) -> int:
        return self.n

    @property
    def agreed(self) -> int:
        return self.right

    @property
    def accuracy_lower(self) -> float:
        return self.lower

    @property
    def implied(self) -> float:
        return self.right / self.n


def _merged(reports: Iterable[LatencyFeedback], version: int) -> dict[tuple[str, str], list[int]]:
    found: dict[tuple[str, str], list[int]] = {}
    for report in reports:
        if report.table_version != version:
            continue
        for cell in report.canary:
            counts = found.setdefault((cell.pair, cell.category), [0, 0])
            counts[0] += cell.n
            counts[1] += min(cell.right, cell.n)
    return found


def merge_canaries(
    reports: Iterable[LatencyFeedback], table: RoutingTable, confidence: float, looks: int = 1
) -> list[PairCanary]:
    """Canary counts per (pair, category) over the reports about `table` (others are
    ignored: a lift counts only items of the demoted table), with bounds at `confidence`;
    the upper bound, which a demotion rests on, holds over `looks` looks at one window's
    counts (Bonferroni: `per_look`). Pairs the table does not hold, and categories it has
    no accuracy for, are skipped."""
    each = 1.0 - (1.0 - confidence) / 2.0
    upper_each = per_look(each, looks)
    result = []
    for (pair, category), (n, right) in sorted(_merged(reports, table.version).items()):
        entry = table.entry(pair)
        if entry is None or category not in entry.accuracy:
            continue
        result.append(
            PairCanary(
                pair=pair,
                category=category,
                n=n,
                right=right,
                lower=lower_bound(right, n, each),
                upper=upper_bound(right, n, upper_each),
                profile_bound=profile_bound(table, entry, category),
                demoted=category in table.demotions.get(pair, {}),
            )
        )
    return result


def contradicts(c: PairCanary, policy: AccuracyCheckPolicy) -> bool:
    """Enough items, and their upper bound is below the profile's bound."""
    return c.n >= policy.min_checks and c.upper < c.profile_bound


def supports(c: PairCanary, policy: AccuracyCheckPolicy) -> bool:
    """Enough items, and their point estimate is at or above the profile's bound (so their
    upper bound is too: never true of what `contradicts` is true of)."""
    return c.n >= policy.min_checks and c.right >= c.profile_bound * c.n


def plan_canary_demotions(
    canaries: Iterable[PairCanary], policy: AccuracyCheckPolicy
) -> DemotionPlan:
    """Demote the pairs the canaries contradict, lift the demoted ones they support; a
    demoted pair between the two stays demoted."""
    demote, lift = [], []
    for c in canaries:
        if c.demoted and supports(c, policy):
            lift.append(c)
        elif not c.demoted and contradicts(c, policy):
            demote.append(c)
    return DemotionPlan(tuple(demote), tuple(lift), source="canary items")
