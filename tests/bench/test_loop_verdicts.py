"""Target checks of the quality-first ladder and the latency-feedback sections."""

from __future__ import annotations

import math
from dataclasses import replace

from bench.feedback.report import feedback_checks, feedback_lines
from bench.feedback.section import FeedbackResult, Phase
from bench.quality.ladder_verdicts import ladder_checks, mean_rung
from bench.quality.report import quality_lines
from bench.quality.results import QUALITY_FIRST, LoopRow, PolicyOutcome, QualityResult
from bench.quality.verdicts import quality_checks

FP16, FP8, INT8, INT4 = (f"m@{q}" for q in ("fp16", "fp8", "int8-w8a8", "awq-int4"))


def outcome(load: float, shares: dict[str, float], attainment: float = 1.0) -> PolicyOutcome:
    return PolicyOutcome(
        policy=QUALITY_FIRST,
        load=load,
        rate_rps=50 * load,
        requests=100,
        ok=100,
        cost_usd_per_1k=1.0,
        budget_attainment=attainment,
        p50_latency_ms=100,
        p99_latency_ms=200,
        categories=(),
        share_by_pair=shares,
    )


def result(*outcomes: PolicyOutcome) -> QualityResult:
    return QualityResult(1, 100, 30.0, FP16, INT4, (), outcomes)


def test_mean_rung_weights_the_declared_precision_by_share() -> None:
    fleet = [FP16, FP8, INT8, INT4]
    assert mean_rung(outcome(1, {FP16: 1.0}), fleet) == 0
    assert mean_rung(outcome(1, {FP16: 0.5, INT4: 0.5}), fleet) == 1.5  # rungs 0 and 3


def test_moving_down_the_ladder_passes_and_identical_shares_fail() -> None:
    moving = result(
        outcome(1, {FP16: 1.0}),
        outcome(2, {FP16: 0.6, FP8: 0.4}),
        outcome(3, {FP16: 0.3, FP8: 0.3, INT8: 0.2, INT4: 0.2}, attainment=0.97),
    )
    steps, budgets, floors = ladder_checks(moving)
    assert steps.passed
    assert steps.figure > steps.baseline
    assert budgets.passed
    assert budgets.figure == 97.0
    assert floors.passed
    flat = result(*(outcome(load, {FP16: 0.8, INT4: 0.2}) for load in (1, 2, 3)))
    assert not ladder_checks(flat)[0].passed
    assert not ladder_checks(result(outcome(1, {FP16: 1.0})))[0].passed  # not measured


def test_feedback_checks_need_a_timely_refit_and_the_traffic_gone() -> None:
    phases = (Phase("before", 100, 1.0, 1.0), Phase("during", 50, 0.9, 0.1))
    good = FeedbackResult(5.0, 12.0, 2, (*phases, Phase("after", 80, 0.0, 1.0)))
    assert all(c.passed for c in feedback_checks(good))
    assert "5.0 s after the slowdown" in "\n".join(feedback_lines(good))
    stuck = FeedbackResult(5.0, math.nan, 1, (*phases, Phase("after", 0, 0.0, 0.0)))
    assert not feedback_checks(stuck)[1].passed
    never = FeedbackResult(math.nan, math.nan, 0, (*phases, Phase("after", 0, 0.0, 0.0)))
    assert not feedback_checks(never)[0].passed


def test_accuracy_drift_checks_need_detection_and_the_move() -> None:
    from bench.feedback.accuracy_drift import AccuracyDriftResult
    from bench.feedback.report import accuracy_drift_checks, accuracy_drift_lines

    good = AccuracyDriftResult(0.25, 2.0, 4.0, 2750, 0.12, 0.866, 0.873)
    assert all(c.passed for c in accuracy_drift_checks(good))
    assert "2.0 s after the drop" in "\n".join(accuracy_drift_lines(good))
    missed = AccuracyDriftResult(0.25, math.nan, math.nan, 10, 0.0, math.nan, 0.873, 1)
    assert not any(c.passed for c in accuracy_drift_checks(missed))  # a healthy demotion too


def test_the_refit_loop_rows_need_no_refit_and_the_same_attainment() -> None:
    quiet = LoopRow(1.0, 1500, attainment_off=0.95, attainment_on=0.946, refits=0)
    refitting = LoopRow(2.0, 1500, attainment_off=0.913, attainment_on=0.895, refits=1)
    checks = quality_checks(replace(result(), loop=(quiet, refitting)))
    loop = {c.name: c.passed for c in checks if "refit" in c.name}
    assert loop == {
        "refits published during the 1x replay, engines unchanged (loop on)": True,
        "budget attainment at 1x, refit loop on vs off": True,
        "refits published during the 2x replay, engines unchanged (loop on)": False,
        "budget attainment at 2x, refit loop on vs off": False,
    }
    assert "| 2x | 1500 | 91.3% | 89.5% | 1 |" in quality_lines(
        replace(result(), loop=(refitting,))
    )
