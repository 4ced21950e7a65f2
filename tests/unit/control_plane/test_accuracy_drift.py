"""Live agreement against the profiles, and the demoted table (docs/control_plane.md
"Accuracy drift")."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from contracts.latency_feedback import AgreementCell, LatencyFeedback
from contracts.policy import AccuracyCheckPolicy, Policy
from contracts.routing_table import RoutingTable, with_version
from control_plane.accuracy_drift import demotions, drifting, merge_agreement, wilson_upper
from control_plane.refit import apply_demotions
from control_plane.table import build_table
from tests.unit.control_plane.factories import make_report

NOW = datetime(2026, 1, 1, tzinfo=UTC)
LOW = "fam@awq-int4"


def _table() -> RoutingTable:
    reports = [
        make_report("fam", "fp16", accuracy={"math": 0.95, "chat": 0.9}),
        make_report("fam", "awq-int4", accuracy={"math": 0.9, "chat": 0.85}),
    ]
    return with_version(build_table(reports, Policy(), NOW, prune=False), 3)


def _report(version: int, checks: int, agreed: int, category: str = "math") -> LatencyFeedback:
    cell = AgreementCell(pair=LOW, category=category, checks=checks, agreed=agreed)
    return LatencyFeedback(
        instance="dp", table_version=version, window_start=NOW, window_end=NOW, agreement=(cell,)
    )


def test_wilson_upper_bound() -> None:
    assert wilson_upper(80, 100) == pytest.approx(0.86, abs=0.01)
    assert wilson_upper(100, 100) == 1.0
    assert wilson_upper(0, 10) > 0.0


def test_agreement_merges_replicas_of_the_current_table_and_implies_a_x_r() -> None:
    table = _table()
    found = merge_agreement([_report(3, 100, 80), _report(3, 100, 70), _report(2, 500, 0)], table)
    (a,) = found
    assert (a.pair, a.category, a.checks, a.agreed) == (LOW, "math", 200, 150)
    assert a.expected == pytest.approx(0.9 * 0.95)
    assert a.reference_accuracy == 0.95


@pytest.mark.parametrize(
    ("checks", "agreed", "drifts"),
    [(200, 170, False), (400, 300, True), (50, 30, False)],  # 0.85 ok; 0.75 low; too few
)
def test_drift_needs_significance_and_enough_checks(checks: int, agreed: int, drifts: bool) -> None:
    policy = AccuracyCheckPolicy(min_checks=100)
    (a,) = merge_agreement([_report(3, checks, agreed)], _table())
    assert drifting(a, policy) is drifts


def test_demotion_lowers_only_the_drifting_category() -> None:
    table = _table()
    agreements = merge_agreement([_report(3, 400, 300), _report(3, 400, 340, "chat")], table)
    demoted = demotions(agreements, AccuracyCheckPolicy(min_checks=100), table)
    assert demoted == {LOW: {"math": pytest.approx(0.75 / 0.95, abs=1e-6)}}
    new = apply_demotions(table, demoted, 400, 600.0, NOW)
    entry = new.entry(LOW)
    assert entry is not None
    assert entry.accuracy["math"] == pytest.approx(0.789474, abs=1e-6)
    assert entry.accuracy["chat"] == 0.85
    assert new.refit is not None
    assert new.refit.note == "accuracy demoted from live agreement: 400 checks over 10 minutes"
    assert new.refit.demoted == {LOW: {"math": pytest.approx(0.789474, abs=1e-6)}}
    RoutingTable.model_validate_json(new.model_dump_json())
