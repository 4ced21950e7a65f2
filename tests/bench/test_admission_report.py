"""Target checks and tables of the admission section (`bench/admission/report.py`)."""

from __future__ import annotations

import math

import pytest

from bench.admission.report import admission_checks, admission_lines, summarise
from bench.admission.section import AdmissionResult, Run, Sample, capacity_rps, schedule

BUDGET_S = 0.4


def served(
    tenant: str, priority: str, n: int, seconds: float = 0.2, burst: bool = True
) -> list[Sample]:
    return [Sample(tenant, priority, burst, 200, seconds) for _ in range(n)]


def shed(tenant: str, priority: str, n: int, seconds: float = 0.001) -> list[Sample]:
    return [Sample(tenant, priority, True, 429, seconds) for _ in range(n)]


def result(burst: list[Sample], nominal: list[Sample] | None = None) -> AdmissionResult:
    solo = Run("solo", tuple(served("steady", "standard", 100)))
    one_x = Run("1x", tuple(nominal if nominal is not None else served("bursty", "batch", 50)))
    off = Run("off", tuple(served("steady", "critical", 10, seconds=2.0)))
    return AdmissionResult(9.0, 41.0, BUDGET_S, solo, one_x, Run("on", tuple(burst)), off)


def test_summarise_counts_late_and_shed_requests_as_missed() -> None:
    row = summarise([*served("s", "c", 6), *served("s", "c", 2, 0.5), *shed("s", "c", 2)], BUDGET_S)
    assert (row.requests, row.attainment, row.shed) == (10, 0.6, 0.2)
    assert row.p95_s == pytest.approx(0.5)  # of the 200 answers only
    assert math.isnan(summarise([], BUDGET_S).attainment)


def test_a_protected_steady_tenant_and_critical_class_with_fast_sheds_pass() -> None:
    burst = [*served("steady", "standard", 99), *served("steady", "critical", 100)]
    burst += shed("bursty", "batch", 300)
    checks = admission_checks(result(burst))
    assert [c.passed for c in checks] == [True, True, True, True]
    assert checks[0].figure == pytest.approx(0.0)  # points below solo
    text = "\n".join(admission_lines(result(burst)))
    assert "| bursty | batch | 300 | 0.0% | 100.0% | — |" in text
    assert "300 shed requests" in text


def test_a_hit_steady_tenant_late_critical_a_shed_at_1x_and_a_slow_429_fail() -> None:
    burst = [*served("steady", "standard", 90), *shed("steady", "standard", 10)]
    burst += [*served("bursty", "critical", 97), *served("bursty", "critical", 3, 0.6)]
    burst += shed("bursty", "batch", 100, seconds=0.02)
    nominal = [*served("bursty", "batch", 49), *shed("bursty", "batch", 1)]
    steady, critical, at_1x, time_to_429 = admission_checks(result(burst, nominal))
    assert not steady.passed
    assert steady.figure == pytest.approx(10.0)
    assert not critical.passed
    assert critical.figure == pytest.approx(97.0)
    assert not at_1x.passed
    assert at_1x.figure == 1.0
    assert not time_to_429.passed
    assert time_to_429.figure == pytest.approx(20.0)


def test_the_schedule_is_seeded_and_bursts_only_in_the_middle_third() -> None:
    cap = capacity_rps()
    tenants = {"steady": 0.3 * cap, "bursty": 0.3 * cap}
    first = schedule(30.0, tenants, 3 * cap)
    assert first == schedule(30.0, tenants, 3 * cap)
    in_burst = [a for a in first if a.tenant == "bursty" and a.in_burst]
    outside = [a for a in first if a.tenant == "bursty" and not a.in_burst]
    assert all(10.0 <= a.at_s < 20.0 for a in in_burst)
    assert len(in_burst) > 5 * len(outside)  # 3x capacity for 10 s against 0.3x for 20 s
