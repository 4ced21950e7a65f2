"""Canary items decide accuracy demotions and lifts (docs/accuracy.md "Canary items"): the
rule, what a demotion publishes, and that the rule has no window that both demotes and lifts."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from contracts.accuracy_bound import lower_bound, upper_bound
from contracts.latency_feedback import CanaryCell, LatencyFeedback
from contracts.policy import AccuracyCheckPolicy, Policy
from contracts.routing_table import RoutingTable, with_version
from control_plane.build.table import build_table
from control_plane.loop.canary_evidence import (
    PairCanary,
    contradicts,
    merge_canaries,
    plan_canary_demotions,
    supports,
)
from control_plane.loop.demotion import apply_demotions
from tests.unit.control_plane.factories import make_report

NOW = datetime(2026, 1, 1, tzinfo=UTC)
LOW = "fam@awq-int4"
CONFIDENCE = 0.99
EACH = 1.0 - (1.0 - CONFIDENCE) / 2.0
POLICY = AccuracyCheckPolicy(min_checks=100, confidence=CONFIDENCE)


def _table(version: int = 3) -> RoutingTable:
    """int4 right on 180 of 200 math items in its profile: bound ~0.867."""
    reports = [
        make_report("fam", "fp16", accuracy={"math": 0.95, "chat": 0.9}),
        make_report("fam", "awq-int4", accuracy={"math": 0.9, "chat": 0.85}),
    ]
    return with_version(build_table(reports, Policy(), NOW, prune=False), version)


def _report(version: int, n: int, right: int, pair: str = LOW) -> LatencyFeedback:
    cell = CanaryCell(pair=pair, category="math", n=n, right=right)
    return LatencyFeedback(
        instance="dp", table_version=version, window_start=NOW, window_end=NOW, canary=(cell,)
    )


def _profile_bound(table: RoutingTable) -> float:
    entry = table.entry(LOW)
    assert entry is not None
    return entry.accuracy_bound["math"]


def test_canaries_merge_replicas_of_the_current_table_only() -> None:
    table = _table()
    reports = [_report(3, 100, 80), _report(3, 60, 70), _report(2, 500, 0)]
    reports.append(_report(3, 50, 50, pair="other@fp16"))  # not in the table
    (c,) = merge_canaries(reports, table, CONFIDENCE)
    assert (c.pair, c.category, c.n, c.right) == (LOW, "math", 160, 140)  # right <= n per cell
    assert c.lower == pytest.approx(lower_bound(140, 160, EACH))
    assert c.upper == pytest.approx(upper_bound(140, 160, EACH))
    assert c.profile_bound == _profile_bound(table)
    assert not c.demoted


@pytest.mark.parametrize(
    ("n", "right", "demote"),
    # healthy (0.90 and 0.86: near the profile); a 15-point drop (0.75); too few items
    [(100, 90, False), (200, 172, False), (100, 75, True), (200, 150, True), (50, 30, False)],
)
def test_a_demotion_needs_the_canarys_upper_bound_below_the_profile_bound(
    n: int, right: int, demote: bool
) -> None:
    plan = plan_canary_demotions(merge_canaries([_report(3, n, right)], _table(), 0.99), POLICY)
    assert bool(plan.demote) is demote
    assert plan.lift == ()


def test_the_upper_bound_a_demotion_rests_on_holds_over_the_loops_looks() -> None:
    """The loop looks at a sliding window's counts every 30 s: 20 looks per 600 s window. At
    one look's confidence a pair right on 76 of 100 items (profile bound 0.867) is demoted;
    over 20 looks (Bonferroni) it is not, while 150 of 200 still is. For a healthy 0.90
    pair with 480 items a window against 0.881, that is 2.6e-5 -> 3.5e-7 per look
    (docs/accuracy.md "Canary items")."""
    table = _table()
    (one,) = merge_canaries([_report(3, 100, 76)], table, CONFIDENCE)
    (over,) = merge_canaries([_report(3, 100, 76)], table, CONFIDENCE, looks=20)
    assert over.upper == pytest.approx(upper_bound(76, 100, 1.0 - (1.0 - EACH) / 20))
    assert over.lower == one.lower  # what a demotion publishes is the same bound
    assert contradicts(one, POLICY)
    assert not contradicts(over, POLICY)
    (drop,) = merge_canaries([_report(3, 200, 150)], table, CONFIDENCE, looks=20)
    assert contradicts(drop, POLICY)


def test_a_demotion_publishes_the_canarys_lower_bound() -> None:
    table = _table()
    plan = plan_canary_demotions(merge_canaries([_report(3, 200, 150)], table, 0.99), POLICY)
    demoted = apply_demotions(table, plan, 600.0, NOW)
    entry = demoted.entry(LOW)
    assert entry is not None
    published = lower_bound(150, 200, EACH)
    assert entry.accuracy_bound["math"] == pytest.approx(published)
    assert 0.65 < published < 0.75  # a valid bound of a 0.75 pair, not 0.000
    assert entry.accuracy["math"] == pytest.approx(0.75)  # the point estimate, for reading
    assert demoted.refit is not None
    assert demoted.refit.demoted == {LOW: {"math": round(published, 6)}}
    assert demoted.refit.note == "accuracy demoted from canary items: 200 checks over 10 minutes"
    kept = demoted.demotions[LOW]["math"]
    assert (kept.checks, kept.agreed, kept.profile_bound) == (200, 150, _profile_bound(table))


def _demoted() -> RoutingTable:
    table = _table()
    plan = plan_canary_demotions(merge_canaries([_report(3, 200, 150)], table, 0.99), POLICY)
    return with_version(apply_demotions(table, plan, 600.0, NOW), 4)


@pytest.mark.parametrize(
    ("version", "n", "right", "lifted"),
    [
        (4, 200, 180, True),  # 0.90 on fresh items: the profile's bound (~0.867) is supported
        (4, 200, 168, False),  # 0.84: not contradicted, not supported: stays demoted
        (4, 200, 150, False),  # still 0.75: stays (never demoted twice)
        (3, 400, 380, False),  # items of the table before the demotion do not count
        (4, 60, 60, False),  # too few fresh items
    ],
)
def test_a_lift_needs_fresh_canaries_at_the_profile_bound(
    version: int, n: int, right: int, lifted: bool
) -> None:
    demoted = _demoted()
    canaries = merge_canaries([_report(version, n, right)], demoted, CONFIDENCE)
    plan = plan_canary_demotions(canaries, POLICY)
    assert plan.demote == ()
    assert bool(plan.lift) is lifted
    if lifted:
        restored = apply_demotions(demoted, plan, 600.0, NOW)
        assert restored.demotions == {}
        assert restored.entry(LOW) == _table().entry(LOW)


def test_no_count_both_contradicts_and_supports_the_profile() -> None:
    for n in (100, 137, 400):
        for right in range(n + 1):
            c = PairCanary(
                pair=LOW,
                category="math",
                n=n,
                right=right,
                lower=lower_bound(right, n, EACH),
                upper=upper_bound(right, n, EACH),
                profile_bound=0.867,
                demoted=False,
            )
            assert not (contradicts(c, POLICY) and supports(c, POLICY)), (n, right)
