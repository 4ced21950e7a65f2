"""Target checks of the hostile-tenant section (`bench/hostile/report.py`)."""

from __future__ import annotations

import math

import pytest

from bench.hostile.report import hostile_checks, hostile_lines
from bench.hostile.section import Caught, HostileResult, Run

CLOSED = {"fam@int4#0": 0, "fam@fp16#0": 0}
CAUGHT = Caught(6.2, 7.0, 8.6, 9.5, 0)
HOSTILE = {"essay, no max_tokens": {200: 21}, "long prompt": {200: 50}}


def run(name: str, **fields: object) -> Run:
    base: dict[str, object] = {
        "name": name, "normal": 200, "attainment": 0.99, "hostile": {},
        "breaker_openings": CLOSED, "checks": 150,
    }  # fmt: skip
    return Run(**(base | fields))  # type: ignore[arg-type]


def result(with_hostile: Run, hung_s: float = 2.0, caught: Caught = CAUGHT) -> HostileResult:
    unguarded = run("unguarded", hostile=HOSTILE, refits=1)  # no target: never fails
    return HostileResult(30.0, run("without"), with_hostile, unguarded, hung_s, 1.0, caught)


def test_a_quiet_run_with_caught_faults_meets_every_target() -> None:
    checks = hostile_checks(result(run("with", attainment=0.985, hostile=HOSTILE)))
    assert [c.passed for c in checks] == [True] * 7
    assert checks[3].figure == pytest.approx(0.5)  # points below the run without it


@pytest.mark.parametrize(
    ("fields", "failed"),
    [
        ({"breaker_openings": {"fam@int4#0": 1, "fam@fp16#0": 0}}, 0),
        ({"refits": 1}, 1),
        ({"demotions": 1}, 2),
        ({"checks": 40}, 2),  # too few checks for a demotion to be possible: 0 proves nothing
        ({"attainment": 0.95}, 3),  # 4 points below
    ],
)
def test_a_false_alarm_lost_attainment_or_too_few_checks_fail(
    fields: dict[str, object], failed: int
) -> None:
    checks = hostile_checks(result(run("with", **fields)))
    assert [i for i, c in enumerate(checks) if not c.passed] == [failed]


def test_missed_faults_fail_and_say_never() -> None:
    missed = Caught(math.nan, math.nan, 8.6, math.nan, 0)
    checks = hostile_checks(result(run("with"), hung_s=math.nan, caught=missed))
    assert [c.passed for c in checks[4:]] == [False, False, False]  # hung, slowed, dropped
    text = "\n".join(hostile_lines(result(run("with"), hung_s=math.nan, caught=missed)))
    assert "breaker open never after the first request" in text
    assert "refit table served never" in text


def test_the_hostile_requests_statuses_are_printed_by_kind() -> None:
    text = "\n".join(hostile_lines(result(run("with", hostile=HOSTILE, refits=2))))
    assert "essay, no max_tokens: 21 x 200; long prompt: 50 x 200" in text
    assert "| with | 200 | 99.0% |" in text
