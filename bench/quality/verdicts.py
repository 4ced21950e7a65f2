"""Target checks for the routing-quality section and the soak run (PURE)."""

from __future__ import annotations

import math

from bench.common.check import Check
from bench.common.stats import ratio
from bench.quality.results import LoopRow, PolicyOutcome, QualityResult
from bench.soak.results import SoakResult

_NAN = math.nan


def _groups(o: PolicyOutcome) -> tuple[int, int]:
    groups = [g for c in o.categories for g in c.groups]
    return sum(1 for g in groups if g.met), len(groups)


def _missing(name: str, target: str) -> Check:
    return Check("quality", name, _NAN, _NAN, _NAN, "", target, False, "not measured")


def _attainment(q: QualityResult, load: float, limit: float) -> Check:
    name = f"Gearbox budget attainment at {load:g}x nominal load"
    g, mp = q.outcome("gearbox", load), q.outcome("most-precise", load)
    target = f">= {limit * 100:g}%"
    if g is None or mp is None:
        return _missing(name, target)
    return Check(
        "quality",
        name,
        g.budget_attainment * 100,
        mp.budget_attainment * 100,
        ratio(g.budget_attainment, mp.budget_attainment),
        "%",
        target,
        g.budget_attainment >= limit,
        "baseline = everything to the most precise pair",
    )


def _floors(q: QualityResult) -> Check:
    name = "Gearbox meets every category's accuracy floor at nominal load"
    g, mp = q.outcome("gearbox", 1.0), q.outcome("most-precise", 1.0)
    if g is None or mp is None:
        return _missing(name, "all floor groups met")
    met, total = _groups(g)
    mp_met, _ = _groups(mp)
    below = [
        f"{c.category}@{gr.floor:.2f}={gr.accuracy:.2f}"
        for c in g.categories
        for gr in c.groups
        if not gr.met
    ]
    detail = "floor groups met (not significantly below, one-sided 95%)"
    if below:
        detail += "; below: " + ", ".join(below)
    return Check(
        "quality",
        name,
        met,
        mp_met,
        ratio(met, total),
        "groups",
        f"all {total} groups met",
        met == total,
        detail,
    )


def _cost(q: QualityResult) -> Check:
    name = "Gearbox cost per 1,000 requests vs everything-to-most-precise (nominal)"
    g, mp = q.outcome("gearbox", 1.0), q.outcome("most-precise", 1.0)
    if g is None or mp is None:
        return _missing(name, "<= 0.50")
    r = ratio(g.cost_usd_per_1k, mp.cost_usd_per_1k)
    return Check(
        "quality",
        name,
        g.cost_usd_per_1k,
        mp.cost_usd_per_1k,
        r,
        "USD",
        "<= 0.50",
        r <= 0.5,
        f"most precise pair: {q.most_precise_pair}",
    )


def _collapse(q: QualityResult, load: float) -> Check:
    name = f"everything-to-most-precise budget attainment at {load:g}x (the baseline collapses)"
    g, mp = q.outcome("gearbox", load), q.outcome("most-precise", load)
    if g is None or mp is None:
        return _missing(name, "< 95%")
    return Check(
        "quality",
        name,
        mp.budget_attainment * 100,
        g.budget_attainment * 100,
        ratio(mp.budget_attainment, g.budget_attainment),
        "%",
        "< 95% (collapses)",
        mp.budget_attainment < 0.95,
        "baseline column = Gearbox at the same load",
    )


def quality_checks(q: QualityResult) -> list[Check]:
    return [
        _attainment(q, 1.0, 0.99),
        _floors(q),
        _cost(q),
        _attainment(q, 2.0, 0.95),
        _collapse(q, 2.0),
        *(check for row in q.loop for check in _loop(row)),
    ]


def _loop(row: LoopRow) -> list[Check]:
    """Issue 27: on unchanged engines the refit loop publishes nothing and costs nothing."""
    gap = (row.attainment_on - row.attainment_off) * 100
    return [
        Check(
            "quality",
            f"refits published during the {row.load:g}x replay, engines unchanged (loop on)",
            row.refits,
            0,
            math.nan,
            "tables",
            "0",
            row.refits == 0,
        ),
        Check(
            "quality",
            f"budget attainment at {row.load:g}x, refit loop on vs off",
            row.attainment_on * 100,
            row.attainment_off * 100,
            ratio(row.attainment_on, row.attainment_off),
            "%",
            "within 1 point",
            abs(gap) <= 1.0,
            f"baseline = loop off; {gap:+.1f} points",
        ),
    ]


def soak_checks(s: SoakResult) -> list[Check]:
    mib = 2**20
    growth = ratio(s.rss_last_bytes, s.rss_first_bytes)
    return [
        Check(
            "soak",
            "unexpected errors during the soak",
            s.unexpected_errors,
            s.requests,
            ratio(s.unexpected_errors, s.requests),
            "requests",
            "0",
            s.unexpected_errors == 0,
            "; ".join(f"{kind}: {n}" for kind, n in s.error_kinds) or "none",
        ),
        Check(
            "soak",
            "data-plane RSS, last vs first minute",
            s.rss_last_bytes / mib,
            s.rss_first_bytes / mib,
            growth,
            "MiB",
            "<= 1.10 (flat)",
            growth <= 1.10,
        ),
        Check(
            "soak",
            "data-plane open file descriptors, last vs first minute",
            s.fds_last,
            s.fds_first,
            ratio(s.fds_last, s.fds_first),
            "fds",
            "<= first + 10 (flat)",
            s.fds_last <= s.fds_first + 10,
        ),
        Check(
            "soak",
            "data plane serves the last republished table",
            s.last_served_version,
            s.last_published_version,
            ratio(s.last_served_version, s.last_published_version),
            "version",
            "= last published",
            s.last_served_version == s.last_published_version,
            f"{s.tables_published} tables published during the run",
        ),
        Check(
            "soak",
            "breaker flapped: circuit transitions seen by the data plane",
            s.breaker_transitions,
            s.fault_toggles,
            ratio(s.breaker_transitions, s.fault_toggles),
            "transitions",
            ">= 2 (opened and closed again)",
            s.breaker_transitions >= 2,
            f"baseline = fault toggles; {s.fallbacks} requests served by a fallback pair",
        ),
    ]
