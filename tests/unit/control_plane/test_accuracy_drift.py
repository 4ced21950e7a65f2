"""Live agreement against the profiles, the demoted table, lifting and carrying a demotion
(docs/accuracy.md "Live checks")."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from contracts.accuracy_bound import lower_bound
from contracts.latency_feedback import AgreementCell, LatencyFeedback
from contracts.policy import AccuracyCheckPolicy, Policy
from contracts.routing_table import RoutingTable, with_version
from control_plane.build.table import build_table
from control_plane.loop.accuracy_drift import drifting, merge_agreement, plan_demotions
from control_plane.loop.demotion import apply_demotions, carry_demotions
from tests.unit.control_plane.factories import make_report

NOW = datetime(2026, 1, 1, tzinfo=UTC)
LOW = "fam@awq-int4"
CONFIDENCE = 0.99
POLICY = AccuracyCheckPolicy(min_checks=100, confidence=CONFIDENCE)


def _built(low_math: float = 0.9) -> RoutingTable:
    reports = [
        make_report("fam", "fp16", accuracy={"math": 0.95, "chat": 0.9}),
        make_report("fam", "awq-int4", accuracy={"math": low_math, "chat": 0.85}),
    ]
    return build_table(reports, Policy(), NOW, prune=False)


def _table(version: int = 3) -> RoutingTable:
    return with_version(_built(), version)


def _report(version: int, checks: int, agreed: int, category: str = "math") -> LatencyFeedback:
    cell = AgreementCell(pair=LOW, category=category, checks=checks, agreed=agreed)
    return LatencyFeedback(
        instance="dp", table_version=version, window_start=NOW, window_end=NOW, agreement=(cell,)
    )


def test_agreement_merges_replicas_of_the_current_table() -> None:
    table = _table()
    reports = [_report(3, 100, 80), _report(3, 100, 70), _report(2, 500, 0)]
    (a,) = merge_agreement(reports, table, CONFIDENCE)
    assert (a.pair, a.category, a.checks, a.agreed) == (LOW, "math", 200, 150)
    entry = table.entry(LOW)
    assert entry is not None
    assert a.profile_bound == entry.accuracy_bound["math"]
    r_low = lower_bound(190, 200, 0.995)  # the reference's 190/200, half the error each
    assert a.expected == pytest.approx(a.profile_bound + r_low - 1.0)
    assert a.accuracy_lower < 0.75 < a.accuracy_upper


@pytest.mark.parametrize(
    ("checks", "agreed", "drifts"),
    # 0.88 agreement: fine; 0.70 of 400: below what a bound of ~0.86 allows; too few checks
    [(400, 352, False), (400, 280, True), (50, 20, False)],
)
def test_drift_needs_evidence_against_the_bound(checks: int, agreed: int, drifts: bool) -> None:
    (a,) = merge_agreement([_report(3, checks, agreed)], _table(), CONFIDENCE)
    assert drifting(a, POLICY) is drifts


def test_a_demotion_publishes_the_live_lower_bound_and_keeps_the_profile_values() -> None:
    table = _table()
    reports = [_report(3, 400, 280), _report(3, 400, 340, "chat")]
    agreements = merge_agreement(reports, table, CONFIDENCE)
    plan = plan_demotions(agreements, POLICY)
    assert [(a.pair, a.category) for a in plan.demote] == [(LOW, "math")]
    new = apply_demotions(table, plan, 600.0, NOW)
    entry, before = new.entry(LOW), table.entry(LOW)
    assert entry is not None
    assert before is not None
    (math_check,) = plan.demote
    assert entry.accuracy_bound["math"] == pytest.approx(math_check.accuracy_lower)
    assert entry.accuracy_bound["math"] < 0.70  # a bound, below the 0.70 agreement itself
    assert entry.accuracy_bound["chat"] == before.accuracy_bound["chat"]
    kept = new.demotions[LOW]["math"]
    assert (kept.profile_accuracy, kept.profile_bound) == (0.9, before.accuracy_bound["math"])
    assert (kept.checks, kept.agreed, kept.base_version) == (400, 280, 3)
    assert new.refit is not None
    assert new.refit.base_version == 3
    assert new.refit.note == "accuracy demoted from live agreement: 400 checks over 10 minutes"
    RoutingTable.model_validate_json(new.model_dump_json())


def _demoted(version: int = 4) -> RoutingTable:
    table = _table()
    agreements = merge_agreement([_report(3, 400, 280)], table, CONFIDENCE)
    return with_version(
        apply_demotions(table, plan_demotions(agreements, POLICY), 600.0, NOW), version
    )


def test_fresh_checks_that_no_longer_contradict_the_profile_lift_the_demotion() -> None:
    demoted = _demoted()
    still_bad = merge_agreement([_report(4, 400, 280)], demoted, CONFIDENCE)
    assert not plan_demotions(still_bad, POLICY)  # held: neither demoted again nor lifted
    too_few = merge_agreement([_report(4, 60, 60)], demoted, CONFIDENCE)
    assert not plan_demotions(too_few, POLICY)
    healthy = merge_agreement([_report(4, 400, 360)], demoted, CONFIDENCE)
    plan = plan_demotions(healthy, POLICY)
    assert [(a.pair, a.category) for a in plan.lift] == [(LOW, "math")]
    assert not plan.demote
    lifted = apply_demotions(demoted, plan, 600.0, NOW)
    original = _table().entry(LOW)
    entry = lifted.entry(LOW)
    assert entry is not None
    assert original is not None
    assert entry.accuracy == original.accuracy
    assert entry.accuracy_bound == original.accuracy_bound
    assert lifted.demotions == {}
    assert lifted.refit is not None
    assert "lifted" in lifted.refit.note


def test_a_rebuild_carries_the_demotion_with_the_new_profile_values() -> None:
    current = _demoted()
    rebuilt = _built(low_math=0.92)
    carried = carry_demotions(rebuilt, current)
    entry, demoted_entry, fresh = carried.entry(LOW), current.entry(LOW), rebuilt.entry(LOW)
    assert entry is not None
    assert demoted_entry is not None
    assert fresh is not None
    assert entry.accuracy_bound["math"] == demoted_entry.accuracy_bound["math"]
    kept = carried.demotions[LOW]["math"]
    assert (kept.profile_accuracy, kept.profile_bound) == (0.92, fresh.accuracy_bound["math"])
    assert carry_demotions(rebuilt, _table()) is rebuilt  # nothing in force: nothing to carry
