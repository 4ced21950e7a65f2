"""Markdown and target checks for the latency-feedback section (PURE)."""

from __future__ import annotations

import math

from bench.common.check import Check
from bench.feedback.accuracy_drift import AccuracyDriftResult
from bench.feedback.section import FeedbackResult

REFIT_WITHIN_S = 60.0


def feedback_lines(r: FeedbackResult) -> list[str]:
    lines = [
        "## 5. Latency feedback: an engine slowed 3x at run time is refit, traffic moves away",
        "",
        f"First refit table served {r.refit_s:.1f} s after the slowdown; the slowed pair served "
        f"none of the last 20 answers {r.moved_s:.1f} s after it; refit tables published: "
        f"{r.refits}.",
        "",
        "| phase | answers | share of the slowed pair | budget attainment |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {p.name} | {p.requests} | {p.share_slowed * 100:.0f}% "
        f"| {p.budget_attainment * 100:.1f}% |"
        for p in r.phases
    ]
    return [*lines, "", *(f"- {n}" for n in r.notes), ""]


def feedback_checks(r: FeedbackResult) -> list[Check]:
    after = r.phases[-1]
    return [
        Check(
            "feedback",
            "a pair slowed 3x: seconds until a refit table is served",
            r.refit_s,
            REFIT_WITHIN_S,
            r.refit_s / REFIT_WITHIN_S,
            "s",
            f"<= {REFIT_WITHIN_S:g} s",
            not math.isnan(r.refit_s) and r.refit_s <= REFIT_WITHIN_S,
        ),
        Check(
            "feedback",
            "after the refit, share of the slowed pair",
            after.share_slowed * 100,
            r.phases[0].share_slowed * 100,
            after.share_slowed / r.phases[0].share_slowed if r.phases[0].share_slowed else math.nan,
            "%",
            "0% (traffic moved)",
            after.requests > 0 and after.share_slowed == 0.0,
            f"baseline = before the slowdown; moved {r.moved_s:.1f} s after it; "
            f"budget attainment after: {after.budget_attainment * 100:.1f}%",
        ),
    ]


DETECT_WITHIN_S = 60.0


def accuracy_drift_lines(r: AccuracyDriftResult) -> list[str]:
    return [
        "## 5b. Accuracy drift: a pair losing 15 points at run time is caught and demoted",
        "",
        f"Canary items (docs/accuracy.md) and agreement re-asks at sample rate "
        f"{r.sample_rate:g}: while the pair was healthy (10 s, checked every 0.5 s) "
        f"{r.healthy_demotions} demotion(s) were published. The canary items' upper bound "
        f"({r.upper_at_detection:.3f}) fell below the profile's bound ({r.expected:.3f}) "
        f"{r.detected_s:.1f} s after the drop; floor-0.85 traffic left the pair "
        f"{r.demoted_s:.1f} s after it (demoted table). Re-asks and canary items: {r.checks}, "
        f"costing ${r.check_cost_usd:.4f} at the asked pairs' prices.",
        "",
    ]


def accuracy_drift_checks(r: AccuracyDriftResult) -> list[Check]:
    return [
        Check(
            "feedback",
            "accuracy demotions while the checked pair is healthy",
            float(r.healthy_demotions),
            0.0,
            math.nan,
            "",
            "0",
            r.healthy_demotions == 0,
            "10 s of checks every 0.5 s before the drop",
        ),
        Check(
            "feedback",
            f"a pair losing 15 points: seconds until detected (sample rate {r.sample_rate:g})",
            r.detected_s,
            DETECT_WITHIN_S,
            r.detected_s / DETECT_WITHIN_S,
            "s",
            f"<= {DETECT_WITHIN_S:g} s",
            not math.isnan(r.detected_s) and r.detected_s <= DETECT_WITHIN_S,
            f"{r.checks} re-asks and canaries, ${r.check_cost_usd:.4f}",
        ),
        Check(
            "feedback",
            "after demotion, floor-0.85 traffic has left the pair (seconds after the drop)",
            r.demoted_s,
            r.detected_s,
            r.demoted_s / r.detected_s if r.detected_s else math.nan,
            "s",
            "moved",
            not math.isnan(r.demoted_s),
            "baseline = detection time",
        ),
    ]
