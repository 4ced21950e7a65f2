"""Accuracy drift: live agreement with the reference pair against what the profiles imply.

PURE. Data planes re-ask a sample of a lower-precision pair's answers on its family's
reference (baseline) pair and count agreements per pair and category
(`contracts.latency_feedback.AgreementCell`). With independent errors, two pairs of accuracy a
and r agree at least a x r of the time (both right; two wrong answers may agree too), so a x r
from the table is the agreement the profiles imply. A pair drifts in a category when, with at
least `min_checks` checks, the one-sided 95% upper Wilson bound of its live agreement is below
that. Its demoted accuracy is what the live agreement implies under the same assumption,
agreement / r, never above the table's value.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from contracts.latency_feedback import LatencyFeedback
from contracts.policy import AccuracyCheckPolicy
from contracts.routing_table import PairEntry, RoutingTable

Z_ONE_SIDED_95 = 1.6448536269514722


@dataclass(frozen=True, slots=True)
class PairAgreement:
    pair: str
    category: str
    checks: int
    agreed: int
    upper: float  # one-sided 95% upper bound of the agreement
    expected: float  # accuracy(pair) x accuracy(reference), from the table
    reference_accuracy: float

    @property
    def ratio(self) -> float:
        return self.agreed / self.checks


def wilson_upper(agreed: int, n: int, z: float = Z_ONE_SIDED_95) -> float:
    p = agreed / n
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return min(1.0, (centre + spread) / (1 + z * z / n))


def reference_of(table: RoutingTable, family: str) -> PairEntry | None:
    """The pair a family's answers are re-asked on: the table's baseline of the family, else
    its most precise pair (precision rank 0), as the data plane compiles it."""
    named = table.baselines.get(family)
    if named is not None:
        return table.entry(named)
    members = [e for e in table.entries if e.family == family]
    return min(members, key=lambda e: e.precision_rank) if members else None


def merge_agreement(reports: Iterable[LatencyFeedback], table: RoutingTable) -> list[PairAgreement]:
    """Agreement per (pair, category) over the reports about `table` (others are ignored)."""
    counts: dict[tuple[str, str], list[int]] = {}
    for report in reports:
        if report.table_version != table.version:
            continue
        for cell in report.agreement:
            found = counts.setdefault((cell.pair, cell.category), [0, 0])
            found[0] += cell.checks
            found[1] += cell.agreed
    result = []
    for (pair, category), (checks, agreed) in sorted(counts.items()):
        entry = table.entry(pair)
        reference = reference_of(table, entry.family) if entry else None
        if entry is None or reference is None:
            continue
        ref_accuracy = reference.accuracy.get(category, 0.0)
        result.append(
            PairAgreement(
                pair,
                category,
                checks,
                min(agreed, checks),
                wilson_upper(min(agreed, checks), checks),
                entry.accuracy.get(category, 0.0) * ref_accuracy,
                ref_accuracy,
            )
        )
    return result


def drifting(a: PairAgreement, policy: AccuracyCheckPolicy) -> bool:
    return a.checks >= policy.min_checks and a.upper < a.expected


def demotions(
    agreements: Iterable[PairAgreement], policy: AccuracyCheckPolicy, table: RoutingTable
) -> dict[str, dict[str, float]]:
    """pair -> category -> the accuracy live agreement implies, for the drifting ones."""
    found: dict[str, dict[str, float]] = {}
    for a in agreements:
        entry = table.entry(a.pair)
        if entry is None or not drifting(a, policy) or a.reference_accuracy <= 0.0:
            continue
        implied = min(entry.accuracy.get(a.category, 0.0), a.ratio / a.reference_accuracy)
        found.setdefault(a.pair, {})[a.category] = round(implied, 6)
    return found
