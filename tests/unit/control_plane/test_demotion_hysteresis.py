"""Demote and lift with hysteresis, simulated over many windows of checks (docs/accuracy.md
"Demote and lift: hysteresis").

The family: a reference right on 388 of 400 math items (truly 0.97) and a variant right on
360 of 400 (truly 0.90 when healthy, bound 0.878 at the table's 90%). Both rules compare the
window's agreement with `expected` = bound + r_low - 1 = 0.8186 (r_low = 0.9406, the
reference's 99.5% lower bound): demote when its upper bound is below, lift when its lower bound
is at or above. Each window's checks are drawn afresh with the agreement a joint error pattern
gives; `plan_demotions` decides on the real table, which `apply_demotions` then changes.
"""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime

import pytest

from contracts.accuracy_bound import lower_bound
from contracts.latency_feedback import AgreementCell, LatencyFeedback
from contracts.policy import AccuracyCheckPolicy, Policy
from contracts.profile_report import ProfileReport
from contracts.routing_table import RoutingTable, with_version
from control_plane.build.table import build_table
from control_plane.loop.accuracy_drift import (
    PairAgreement,
    drifting,
    merge_agreement,
    plan_demotions,
    supporting,
)
from control_plane.loop.demotion import apply_demotions
from tests.unit.control_plane.factories import report_data

NOW = datetime(2026, 1, 1, tzinfo=UTC)
LOW = "fam@int8"
CONFIDENCE = 0.99
EACH = 1.0 - (1.0 - CONFIDENCE) / 2.0
POLICY = AccuracyCheckPolicy(min_checks=100, confidence=CONFIDENCE)
R, HEALTHY, DEGRADED = 0.97, 0.90, 0.75  # true accuracies; DEGRADED: 15 points lost
WINDOWS = 1_000


def _report(quantization: str, accuracy: float) -> ProfileReport:
    data = report_data("fam", quantization, accuracy={"math": accuracy})
    data["accuracy"][0]["n"] = 400
    return ProfileReport.model_validate(data)


def _profiled() -> RoutingTable:
    reports = [_report("fp16", 0.97), _report("int8", 0.90)]
    return with_version(build_table(reports, Policy(), NOW, prune=False), 1)


def _look(table: RoutingTable, checks: int, agreed: int) -> PairAgreement:
    cell = AgreementCell(pair=LOW, category="math", checks=checks, agreed=agreed)
    report = LatencyFeedback(
        instance="dp", table_version=table.version, window_start=NOW, window_end=NOW,
        agreement=(cell,),
    )  # fmt: skip
    (a,) = merge_agreement([report], table, CONFIDENCE)
    return a


def _threshold() -> float:
    return _look(_profiled(), 100, 90).expected


def _demoted() -> RoutingTable:
    """The profiled table with int8 demoted in math on 400 checks agreeing 0.70."""
    table = _profiled()
    plan = plan_demotions([_look(table, 400, 280)], POLICY)
    assert plan.demote
    return with_version(apply_demotions(table, plan, 600.0, NOW), 2)


def _lift_chance(checks: int, agreement: float) -> float:
    """Exactly: the chance that `checks` checks agreeing at rate `agreement` lift."""
    t = _threshold()
    k0 = next((k for k in range(checks + 1) if lower_bound(k, checks, EACH) >= t), checks + 1)
    return sum(
        math.comb(checks, k) * agreement**k * (1.0 - agreement) ** (checks - k)
        for k in range(k0, checks + 1)
    )


def _run(table: RoutingTable, agreement: float, checks: int, windows: int, seed: int) -> list[str]:
    """What each of `windows` windows of `checks` fresh checks did to `table`, in order."""
    rng = random.Random(seed)
    done = []
    for _ in range(windows):
        agreed = sum(rng.random() < agreement for _ in range(checks))
        plan = plan_demotions([_look(table, checks, agreed)], POLICY)
        if plan:
            table = with_version(apply_demotions(table, plan, 600.0, NOW), table.version + 1)
        done.append("demote" if plan.demote else "lift" if plan.lift else "-")
    return done


def test_the_threshold_is_the_least_agreement_of_a_pair_at_its_bound() -> None:
    a = _look(_profiled(), 100, 90)
    r_low = lower_bound(388, 400, EACH)
    assert r_low == pytest.approx(0.9406, abs=1e-4)
    assert a.profile_bound == pytest.approx(lower_bound(360, 400, 0.9))
    assert a.expected == pytest.approx(a.profile_bound + r_low - 1.0)
    assert a.expected == pytest.approx(0.8186, abs=1e-4)


@pytest.mark.parametrize("checks", [100, 200, 400])
def test_one_windows_checks_never_both_lift_and_demote(checks: int) -> None:
    demoted, profiled = _demoted(), _profiled()
    for agreed in range(checks + 1):
        on_demoted, on_profiled = _look(demoted, checks, agreed), _look(profiled, checks, agreed)
        assert not (supporting(on_demoted, POLICY) and drifting(on_profiled, POLICY))


# The agreement of a pair of accuracy a with the reference (accuracy r), by joint errors:
# worst for the claim tested (a + 1 - r: wrong where the reference is, with its wrong
# answers; a + r - 1: wrong only where the reference is right), independent errors with
# distinct wrong answers (a * r), and the simulator's (a: its wrong answer holds no number,
# so only checks where the reference is right count).
DEGRADED_AGREEMENT = {
    "worst": DEGRADED + 1 - R,
    "independent": DEGRADED * R,
    "simulator": DEGRADED,
}
HEALTHY_AGREEMENT = {"worst": HEALTHY + R - 1, "independent": HEALTHY * R, "simulator": HEALTHY}


@pytest.mark.parametrize("pattern", sorted(DEGRADED_AGREEMENT))
def test_a_pair_that_lost_15_points_is_never_lifted(pattern: str) -> None:
    """1,000 windows of 200 checks each on the demoted table: no lift. The exact chance of
    one at a look is at most 4.2e-5 (worst case), so at most 0.042 over the 1,000 looks (union
    bound). The old rule (lift once the checks no longer contradict the profile) would lift in
    32-90% of the windows."""
    agreement = DEGRADED_AGREEMENT[pattern]
    assert agreement < _threshold()  # 15 points > (1 - r) + (1 - r_low): decidable
    per_look = _lift_chance(200, agreement)
    assert per_look <= 4.2e-5
    assert per_look * WINDOWS <= 0.042
    done = _run(_demoted(), agreement, 200, WINDOWS, seed=22)
    assert done.count("lift") == 0
    assert done.count("demote") == 0  # demoted throughout: no table republished
    demoted = _demoted()
    rng = random.Random(22)
    old_rule_lifts = sum(
        not drifting(_look(demoted, 200, sum(rng.random() < agreement for _ in range(200))),
                     POLICY)
        for _ in range(200)
    )  # fmt: skip
    assert old_rule_lifts >= 50  # exactly 32-90% of windows, by the pattern


@pytest.mark.parametrize(
    ("pattern", "checks", "windows"),
    # per-look lift chance (exact) at 400 checks: worst 0.537, independent 0.607, simulator
    # 0.978 (0.729 at 200); lifted within 1 + log(0.001) / log(1 - chance) looks w.p. 99.9%
    [("worst", 400, 10), ("independent", 400, 9), ("simulator", 400, 3), ("simulator", 200, 7)],
)
def test_a_healthy_pair_demoted_by_bad_luck_is_lifted_within_the_stated_windows(
    pattern: str, checks: int, windows: int
) -> None:
    agreement = HEALTHY_AGREEMENT[pattern]
    chance = _lift_chance(checks, agreement)
    assert windows >= 1 + math.log(0.001) / math.log(1.0 - chance)
    waited = []
    for seed in range(200):
        done = _run(_demoted(), agreement, checks, windows, seed=seed)
        assert "lift" in done, f"seed {seed}: not lifted in {windows} windows"
        waited.append(done.index("lift") + 1)
    assert sum(waited) / len(waited) == pytest.approx(1.0 / chance, rel=0.25)


@pytest.mark.parametrize("pattern", sorted(HEALTHY_AGREEMENT))
def test_a_lifted_healthy_pair_is_not_demoted_again(pattern: str) -> None:
    """After the lift, 1,000 windows of 200 checks: the pair stays lifted (a demotion of a
    pair at or above its bound has chance at most 0.5% per look; here far less)."""
    agreement = HEALTHY_AGREEMENT[pattern]
    done = _run(_demoted(), agreement, 400, 20, seed=7)
    lifted_at = done.index("lift")
    assert done[lifted_at + 1 :].count("demote") == 0
    profiled = _profiled()
    assert _run(profiled, agreement, 200, WINDOWS, seed=8).count("demote") == 0


def test_the_lifting_evidence_does_not_count_on_the_lifted_table() -> None:
    """A lift publishes a new version; checks are counted per version, so a demotion of the
    lifted table needs `min_checks` fresh checks (the lifting ones cannot demote it)."""
    demoted = _demoted()
    cell = AgreementCell(pair=LOW, category="math", checks=400, agreed=380)
    report = LatencyFeedback(
        instance="dp", table_version=demoted.version, window_start=NOW, window_end=NOW,
        agreement=(cell,),
    )  # fmt: skip
    plan = plan_demotions(merge_agreement([report], demoted, CONFIDENCE), POLICY)
    assert plan.lift
    lifted = with_version(apply_demotions(demoted, plan, 600.0, NOW), demoted.version + 1)
    assert merge_agreement([report], lifted, CONFIDENCE) == []
