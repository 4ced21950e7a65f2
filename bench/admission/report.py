"""Markdown and target checks for the admission section (PURE)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from bench.admission.section import MIX, AdmissionResult, Run, Sample
from bench.common.check import Check
from bench.common.stats import quantile

STEADY_POINTS = 2.0  # the steady tenant's attainment under the burst, below its solo run
CRITICAL_ATTAINMENT = 0.99  # the critical class during the burst (3x capacity and more)
SHED_WITHIN_S = 0.005  # a shed request's time to its 429, at the client (p99)


@dataclass(frozen=True, slots=True)
class Row:
    requests: int
    attainment: float  # share answered 200 within the budget (nan: no requests)
    shed: float  # share answered 429 (nan: no requests)
    p95_s: float  # of the 200 answers (nan: none)


def summarise(samples: Iterable[Sample], budget_s: float) -> Row:
    picked = list(samples)
    n = len(picked)
    if not n:
        return Row(0, math.nan, math.nan, math.nan)
    met = sum(s.status == 200 and s.seconds <= budget_s for s in picked)
    shed = sum(s.status == 429 for s in picked)
    served = sorted(s.seconds for s in picked if s.status == 200)
    return Row(n, met / n, shed / n, quantile(served, 0.95))


def _pick(run: Run, tenant: str | None = None, priority: str | None = None) -> list[Sample]:
    return [
        s
        for s in run.samples
        if (tenant is None or s.tenant == tenant) and (priority is None or s.priority == priority)
    ]


def _pct(x: float) -> str:
    return "—" if math.isnan(x) else f"{x * 100:.1f}%"


def _ms(x: float) -> str:
    return "—" if math.isnan(x) else f"{x * 1000:.0f} ms"


def _cells(row: Row) -> str:
    return f"{row.requests} | {_pct(row.attainment)} | {_pct(row.shed)} | {_ms(row.p95_s)}"


def shed_seconds(run: Run) -> list[float]:
    return sorted(s.seconds for s in run.samples if s.status == 429)


def _other_statuses(run: Run) -> str:
    counts: dict[int, int] = {}
    for s in run.samples:
        if s.status not in (200, 429):
            counts[s.status] = counts.get(s.status, 0) + 1
    return ", ".join(f"{n} x {st}" for st, n in sorted(counts.items())) or "none"


def admission_lines(r: AdmissionResult) -> list[str]:
    lines = [
        "## 9. Admission: a tenant's burst at 3x the fleet's capacity, with and without shedding",
        "",
        "| tenant | priority | admission: requests | attainment | shed | p95 "
        "| no admission: requests | attainment | shed | p95 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for tenant in ("steady", "bursty"):
        for priority in (*(m[0] for m in MIX), None):
            on = summarise(_pick(r.burst, tenant, priority), r.budget_s)
            off = summarise(_pick(r.burst_no_admission, tenant, priority), r.budget_s)
            lines.append(f"| {tenant} | {priority or 'all'} | {_cells(on)} | {_cells(off)} |")
    lines += [
        "",
        "| run | tenant | requests | attainment | shed | p95 |",
        "|---|---|---|---|---|---|",
    ]
    for run in (r.solo, r.nominal):
        for tenant in sorted({s.tenant for s in run.samples}, reverse=True):
            row = summarise(_pick(run, tenant), r.budget_s)
            lines.append(f"| {run.name} | {tenant} | {_cells(row)} |")
    shed = shed_seconds(r.burst)
    lines += [
        "",
        f"Time to the 429 at the client, {len(shed)} shed requests: "
        + (
            f"p50 {_ms_fine(quantile(shed, 0.5))}, p99 {_ms_fine(quantile(shed, 0.99))}, "
            f"max {_ms_fine(shed[-1])}."
            if shed
            else "none shed."
        ),
        f"Answers other than 200 and 429 (0: no answer): admission on {_other_statuses(r.burst)}; "
        f"off {_other_statuses(r.burst_no_admission)}.",
        "",
        *(f"- {n}" for n in r.notes),
        "",
    ]
    return lines


def _ms_fine(x: float) -> str:
    return f"{x * 1000:.1f} ms"


def admission_checks(r: AdmissionResult) -> list[Check]:
    return [
        _steady_check(r),
        _critical_check(r),
        _nominal_check(r),
        _shed_time_check(r),
    ]


def _steady_check(r: AdmissionResult) -> Check:
    solo = summarise(_pick(r.solo, "steady"), r.budget_s).attainment
    burst = summarise(_pick(r.burst, "steady"), r.budget_s).attainment
    delta = (solo - burst) * 100
    ok = not math.isnan(delta) and delta <= STEADY_POINTS
    return Check(
        "admission",
        "admission: the steady tenant's budget attainment under the burst, points below solo",
        delta,
        STEADY_POINTS,
        delta / STEADY_POINTS,
        "points",
        f"<= {STEADY_POINTS:g} points",
        ok,
        f"solo {_pct(solo)}, beside the burst {_pct(burst)}",
    )


def _critical_check(r: AdmissionResult) -> Check:
    during = [s for s in _pick(r.burst, priority="critical") if s.in_burst]
    row = summarise(during, r.budget_s)
    return Check(
        "admission",
        "admission: the critical class's budget attainment during the 3x burst",
        row.attainment * 100,
        CRITICAL_ATTAINMENT * 100,
        row.attainment / CRITICAL_ATTAINMENT,
        "%",
        f">= {CRITICAL_ATTAINMENT * 100:g}%",
        row.requests > 0 and row.attainment >= CRITICAL_ATTAINMENT,
        f"{row.requests} critical requests sent in the burst window",
    )


def _nominal_check(r: AdmissionResult) -> Check:
    shed = sum(s.status == 429 for s in r.nominal.samples)
    return Check(
        "admission",
        "admission: requests shed at 1x (both tenants at nominal rates)",
        float(shed),
        0.0,
        math.nan,
        "",
        "0",
        shed == 0 and len(r.nominal.samples) > 0,
        f"of {len(r.nominal.samples)}",
    )


def _shed_time_check(r: AdmissionResult) -> Check:
    shed = shed_seconds(r.burst)
    p99 = quantile(shed, 0.99) if shed else math.nan
    return Check(
        "admission",
        "admission: a shed request's time to its 429 at the client, p99",
        p99 * 1000,
        SHED_WITHIN_S * 1000,
        p99 / SHED_WITHIN_S,
        "ms",
        f"<= {SHED_WITHIN_S * 1000:g} ms",
        bool(shed) and p99 <= SHED_WITHIN_S,
        f"{len(shed)} shed" + (f", max {_ms_fine(shed[-1])}" if shed else ""),
    )
