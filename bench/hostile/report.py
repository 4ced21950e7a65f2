"""Markdown and target checks for the hostile-tenant section (PURE)."""

from __future__ import annotations

import math
import statistics

from bench.common.check import Check
from bench.feedback.accuracy_drift import CHECKS
from bench.feedback.report import DETECT_WITHIN_S, REFIT_WITHIN_S
from bench.hostile.canary import WITHIN_S
from bench.hostile.engine_report import engine_checks, engine_lines
from bench.hostile.section import Caught, HostileResult, Run

ATTAINMENT_POINTS = 1.0  # the other clients' budget attainment, with against without
# Before the per-endpoint stall model a hung engine was out in 1.7-3.2 s; its windows alone
# took 7.7 s, the engine's still counters over three windows 5.0 s (docs/reliability.md).
HUNG_DETECT_S = 6.0


def _statuses(statuses: dict[int, int]) -> str:
    return ", ".join(f"{n} x {s}" for s, n in sorted(statuses.items())) or "-"


def _hostile(run: Run) -> str:
    return "; ".join(f"{kind}: {_statuses(s)}" for kind, s in run.hostile.items()) or "-"


def _seconds(s: float) -> str:
    return "never" if math.isnan(s) else f"{s:.1f} s"


def _run_row(run: Run) -> str:
    openings = ", ".join(f"{e} {n}" for e, n in run.breaker_openings.items())
    loop = ", ".join(f"{o} {n}" for o, n in run.loop.items()) or "-"
    return (
        f"| {run.name} | {run.normal} | {run.attainment * 100:.1f}% "
        f"| {run.cheap_share * 100:.0f}% | {openings} | {run.refits} | {run.demotions} "
        f"| {run.checks} / {run.checks_unsent} / ${run.check_usd:.4f} | {run.capped} | {loop} |"
    )


def _caught_rows(r: HostileResult) -> list[str]:
    c = r.caught
    return [
        "| fault | caught | target | measured by |",
        "|---|---|---|---|",
        f"| the cheap engine hangs (no headers ever) | breaker open {_seconds(r.hung_detect_s)} "
        f"after the first request; {r.hung_served * 100:.1f}% of the normal requests answered "
        f"meanwhile | <= {HUNG_DETECT_S:g} s | this section |",
        f"| an engine slowed 3x | refit table served {_seconds(c.slowed_refit_s)} after the "
        f"slowdown; traffic left it after {_seconds(c.slowed_moved_s)} "
        f"| <= {REFIT_WITHIN_S:g} s | section 5's scenario |",
        f"| a pair losing 15 points of accuracy | detected {_seconds(c.drop_detect_s)} after the "
        f"drop; floor traffic left it (demoted) after {_seconds(c.drop_demoted_s)} "
        f"| <= {DETECT_WITHIN_S:g} s | section 5b's scenario |",
    ]


def _live_canary(r: HostileResult) -> str:
    """The canary items the data plane sent in the run without the hostile client."""
    run, minutes = r.without, r.seconds / 60.0
    parts = [
        f"{pair}: {n / minutes:.0f} items/min, ${usd / minutes * 60:.4f}/hour"
        for pair, (n, usd) in run.canary.items()
    ]
    return "; ".join(parts) + f"; {run.canary_over_budget} left unsent over budget"


def _canary_rows(r: HostileResult) -> list[str]:
    c = r.canary
    if c is None:
        return []
    seen = sorted(s for s in c.drop_s if math.isfinite(s))
    p95 = seen[max(0, math.ceil(0.95 * len(c.drop_s)) - 1)] if seen else math.nan
    dearest = max(c.worst_usd_per_hour, key=c.worst_usd_per_hour.__getitem__)
    rates = sorted(c.pair_per_minute.values())
    return [
        f"Canary items at the defaults ({c.items_per_minute:g} items a minute and "
        f"${c.usd_per_hour:g} an hour per pair, within the share of each pair's capacity: "
        f"{rates[0]:.0f}-{rates[-1]:.0f} a minute here), on a simulated clock "
        "(bench/hostile/canary.py):",
        "",
        "| row | measured | target |",
        "|---|---|---|",
        f"| a true 15-point drop (math 0.90 -> 0.75, routed on {c.drop_profile_bound:.3f}) | "
        f"demoted within {WITHIN_S / 60:g} min in {c.within * 100:.1f}% of {c.drop_runs} runs; "
        f"median {statistics.median(c.drop_s):.0f} s, p95 {p95:.0f} s, latest "
        f"{_seconds(max(c.drop_s))} | 100% within {WITHIN_S:g} s |",
        f"| healthy pairs, 40% both-wrong client prompts | {c.healthy_demotions} demotions in "
        f"{c.healthy_hours} h of the example fleet ({c.cells} pair-categories) | 0 |",
        f"| the same, judged at one look's level (`canary_looks` 1; for contrast) | "
        f"{c.healthy_one_look} demotions | - |",
        f"| spend, worst case per pair | ${c.worst_usd_per_hour[dearest]:.3f}/hour on {dearest} "
        f"(an item at most ${c.max_item_usd:.2g}) | <= ${c.usd_per_hour:g}/hour |",
        f"| spend, measured live ({r.seconds:g} s without the hostile client) | "
        f"{_live_canary(r)} | "
        f"<= ${c.usd_per_hour:g}/hour, 0 unsent |",
        "",
    ]


def hostile_lines(r: HostileResult) -> list[str]:
    return [
        "## 7. A hostile tenant: one client's legal but odd requests as 10% of the load",
        "",
        "| run | normal answers | their budget attainment | served by the cheap pair "
        "| breaker openings | refits | demotions | accuracy checks decided / unsent / cost "
        "| latency samples capped | loop checks |",
        "|---|---|---|---|---|---|---|---|---|---|",
        _run_row(r.without),
        _run_row(r.with_hostile),
        _run_row(r.unguarded),
        "",
        f"The hostile client's requests (kind: count x status): {_hostile(r.with_hostile)}.",
        "",
        "Still caught, beside the hostile traffic's figures:",
        "",
        *_caught_rows(r),
        "",
        *_canary_rows(r),
        *engine_lines(r.engines),
        *(f"- {n}" for n in r.notes),
        "",
    ]


def _zero(name: str, total: int, detail: str, ok: bool) -> Check:
    return Check("hostile", name, float(total), 0.0, math.nan, "", "0", total == 0 and ok, detail)


def _healthy_checks(r: HostileResult) -> list[Check]:
    w, h = r.without, r.with_hostile
    openings = sum(w.breaker_openings.values()) + sum(h.breaker_openings.values())
    return [
        _zero(
            "hostile client (10% odd requests): breaker openings of healthy engines",
            openings,
            f"without {sum(w.breaker_openings.values())}, with "
            f"{sum(h.breaker_openings.values())}; hostile requests: {_hostile(h)}",
            h.normal > 0,
        ),
        _zero(
            "hostile client: latency refits of engines as fast as ever",
            w.refits + h.refits,
            f"without {w.refits}, with {h.refits}; {h.capped} samples capped",
            h.normal > 0,
        ),
        _zero(
            "hostile client: accuracy demotions of pairs as accurate as ever",
            w.demotions + h.demotions,
            f"without {w.demotions}, with {h.demotions}; checks decided: without {w.checks}, "
            f"with {h.checks} (a demotion needs {CHECKS.min_checks})",
            min(w.checks, h.checks) >= CHECKS.min_checks,
        ),
    ]


def _caught_checks(r: HostileResult, c: Caught) -> list[Check]:
    def within(name: str, s: float, limit: float, detail: str = "", also: bool = True) -> Check:
        ok = not math.isnan(s) and s <= limit and also
        return Check("hostile", name, s, limit, s / limit, "s", f"<= {limit:g} s", ok, detail)

    return [
        within("a hung engine: seconds until its breaker opens", r.hung_detect_s, HUNG_DETECT_S),
        within(
            "an engine slowed 3x: seconds until its refit table is served (section 5's run)",
            c.slowed_refit_s,
            REFIT_WITHIN_S,
            f"traffic left it after {_seconds(c.slowed_moved_s)}",
        ),
        within(
            "a pair losing 15 points: seconds until detected (section 5b's run)",
            c.drop_detect_s,
            DETECT_WITHIN_S,
            f"demoted, traffic left it after {_seconds(c.drop_demoted_s)}",
            also=not math.isnan(c.drop_demoted_s),
        ),
    ]


def _canary_checks(r: HostileResult) -> list[Check]:
    c = r.canary
    if c is None:
        return []
    worst = max(c.worst_usd_per_hour.values())
    live = max((usd / r.seconds * 3600 for _, usd in r.without.canary.values()), default=0.0)
    budget = c.usd_per_hour
    return [
        Check(
            "hostile", "canaries: share of true 15-point drops demoted within 10 minutes",
            c.within, 1.0, c.within, "", "1.0", c.within >= 1.0,
            f"{c.drop_runs} simulated runs, median {statistics.median(c.drop_s):.0f} s",
        ),
        _zero(
            "canaries: demotions of healthy pairs, 40% both-wrong prompts",
            c.healthy_demotions,
            f"{c.healthy_hours} simulated hours of {c.cells} pair-categories",
            c.healthy_hours > 0,
        ),
        Check(
            "hostile", "canaries: spend per pair per hour at the default rate (worst case)",
            worst, budget, worst / budget, "$/hour", f"<= {budget:g}",
            worst <= budget and live <= budget and r.without.canary_over_budget == 0
            and bool(r.without.canary),
            f"measured live: {_live_canary(r)}",
        ),
    ]  # fmt: skip


def hostile_checks(r: HostileResult) -> list[Check]:
    delta = (r.without.attainment - r.with_hostile.attainment) * 100
    attainment = Check(
        "hostile",
        "hostile client: other clients' budget attainment, points below the run without it",
        delta,
        ATTAINMENT_POINTS,
        delta / ATTAINMENT_POINTS,
        "points",
        f"<= {ATTAINMENT_POINTS:g} point",
        r.with_hostile.normal > 0 and delta <= ATTAINMENT_POINTS,
        f"without {r.without.attainment * 100:.1f}%, with {r.with_hostile.attainment * 100:.1f}%",
    )
    return [
        *_healthy_checks(r),
        attainment,
        *_caught_checks(r, r.caught),
        *_canary_checks(r),
        *engine_checks(r.engines),
    ]
