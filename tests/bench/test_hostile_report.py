"""Target checks of the hostile-tenant section (`bench/hostile/report.py`)."""

from __future__ import annotations

import math

import pytest

from bench.hostile.report import hostile_checks, hostile_lines
from bench.hostile.section import HostileResult, Run

CLOSED = {"fam@int4#0": 0, "fam@fp16#0": 0}


def result(with_hostile: Run, hung_s: float = 2.0) -> HostileResult:
    without = Run("without", 200, 0.99, {}, CLOSED)
    return HostileResult(30.0, without, with_hostile, hung_s, 1.0)


def test_no_openings_close_attainment_and_a_caught_hang_pass() -> None:
    checks = hostile_checks(result(Run("with", 190, 0.985, {200: 21}, CLOSED)))
    assert [c.passed for c in checks] == [True, True, True]
    assert checks[1].figure == pytest.approx(0.5)  # points below the run without it


def test_an_opened_healthy_breaker_or_lost_attainment_or_a_missed_hang_fail() -> None:
    opened = Run("with", 190, 0.95, {504: 21}, {"fam@int4#0": 1, "fam@fp16#0": 0})
    openings, attainment, hung = hostile_checks(result(opened, hung_s=math.nan))
    assert not openings.passed
    assert not attainment.passed  # 4 points below
    assert not hung.passed
    text = "\n".join(hostile_lines(result(opened, hung_s=math.nan)))
    assert "21 x 504" in text
    assert "its breaker opened never" in text
