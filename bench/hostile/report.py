"""Markdown and target checks for the hostile-tenant section (PURE)."""

from __future__ import annotations

import math

from bench.common.check import Check
from bench.hostile.section import HostileResult, Run

ATTAINMENT_POINTS = 1.0  # the other clients' budget attainment, with against without
HUNG_DETECT_S = 10.0


def _essays(run: Run) -> str:
    return ", ".join(f"{n} x {s}" for s, n in sorted(run.essays.items())) or "-"


def hostile_lines(r: HostileResult) -> list[str]:
    lines = [
        "## 7. A hostile tenant: long answers without max_tokens as 10% of the load",
        "",
        "| run | normal answers | their budget attainment | essays (status) | breaker openings |",
        "|---|---|---|---|---|",
    ]
    for run in (r.without, r.with_hostile):
        openings = ", ".join(f"{e} {n}" for e, n in run.breaker_openings.items())
        lines.append(
            f"| {run.name} | {run.normal} | {run.attainment * 100:.1f}% | {_essays(run)} "
            f"| {openings} |"
        )
    detect = "never" if math.isnan(r.hung_detect_s) else f"{r.hung_detect_s:.1f} s"
    lines += [
        "",
        f"A truly hung engine (no headers ever): its breaker opened {detect} after the first "
        f"request; {r.hung_served * 100:.1f}% of the normal requests were answered (by the "
        "other pair, after the hung attempt reached its limit) meanwhile.",
        "",
        *(f"- {n}" for n in r.notes),
        "",
    ]
    return lines


def hostile_checks(r: HostileResult) -> list[Check]:
    openings = sum(r.with_hostile.breaker_openings.values())
    delta = (r.without.attainment - r.with_hostile.attainment) * 100
    return [
        Check(
            "hostile",
            "hostile client (10% long answers): breaker openings of healthy engines",
            float(openings),
            0.0,
            math.nan,
            "",
            "0",
            openings == 0 and r.with_hostile.normal > 0,
            f"essays: {_essays(r.with_hostile)}",
        ),
        Check(
            "hostile",
            "hostile client: other clients' budget attainment, points below the run without it",
            delta,
            ATTAINMENT_POINTS,
            delta / ATTAINMENT_POINTS,
            "points",
            f"<= {ATTAINMENT_POINTS:g} point",
            r.with_hostile.normal > 0 and delta <= ATTAINMENT_POINTS,
            f"without {r.without.attainment * 100:.1f}%, with "
            f"{r.with_hostile.attainment * 100:.1f}%",
        ),
        Check(
            "hostile",
            "a hung engine: seconds until its breaker opens",
            r.hung_detect_s,
            HUNG_DETECT_S,
            r.hung_detect_s / HUNG_DETECT_S,
            "s",
            f"<= {HUNG_DETECT_S:g} s",
            not math.isnan(r.hung_detect_s) and r.hung_detect_s <= HUNG_DETECT_S,
        ),
    ]
