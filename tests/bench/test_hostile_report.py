"""Target checks of the hostile-tenant section (`bench/hostile/report.py`)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from bench.hostile.canary import CanaryRows
from bench.hostile.engines import EngineRows, PageRow, ToolsRow
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


def canary_rows(**fields: object) -> CanaryRows:
    base: dict[str, object] = {
        "items_per_minute": 240.0, "usd_per_hour": 0.5, "drop_runs": 4,
        "pair_per_minute": {"a@int4": 207.5, "b@fp16": 240.0},
        "drop_s": (120.0, 150.0, 180.0, 390.0), "drop_profile_bound": 0.881,
        "healthy_hours": 2, "healthy_demotions": 0, "healthy_one_look": 1, "cells": 30,
        "worst_usd_per_hour": {"a@int4": 0.18, "b@fp16": 0.03}, "max_item_usd": 1.7e-5,
    }  # fmt: skip
    return CanaryRows(**(base | fields))  # type: ignore[arg-type]


def with_canaries(rows: CanaryRows, live: dict[str, tuple[int, float]] | None = None,
                  over_budget: int = 0) -> HostileResult:  # fmt: skip
    spent = live if live is not None else {"fam@int4": (120, 0.0005), "fam@fp16": (120, 0.002)}
    without = run("without", canary=spent, canary_over_budget=over_budget)
    unguarded = run("unguarded", hostile=HOSTILE, refits=1)
    return HostileResult(
        30.0, without, run("with", hostile=HOSTILE), unguarded, 2.0, 1.0, CAUGHT, canary=rows
    )


def test_the_canary_rows_print_target_measured_and_pass() -> None:
    r = with_canaries(canary_rows())
    checks = hostile_checks(r)
    assert [c.passed for c in checks[7:]] == [True, True, True]
    text = "\n".join(hostile_lines(r))
    assert "demoted within 10 min in 100.0% of 4 runs; median 165 s, p95 390 s" in text
    assert "| 0 demotions in 2 h of the example fleet (30 pair-categories) | 0 |" in text
    assert "$0.180/hour on a@int4" in text
    assert "within the share of each pair's capacity: 208-240 a minute here" in text
    assert "fam@int4: 240 items/min, $0.0600/hour" in text  # 120 items and $0.0005 in 30 s


@pytest.mark.parametrize(
    ("rows", "live", "over", "failed"),
    [
        (canary_rows(drop_s=(120.0, 150.0, 180.0, math.inf)), None, 0, 7),  # one never
        (canary_rows(drop_s=(120.0, 150.0, 180.0, 660.0)), None, 0, 7),  # one late
        (canary_rows(healthy_demotions=1), None, 0, 8),
        (canary_rows(worst_usd_per_hour={"a@int4": 0.6}), None, 0, 9),
        (canary_rows(), {"fam@int4": (120, 0.01)}, 0, 9),  # $1.20 an hour measured
        (canary_rows(), None, 3, 9),  # items left unsent: the budget cut the rate
        (canary_rows(), {}, 0, 9),  # no canary item sent at all
    ],
)
def test_a_late_drop_a_healthy_demotion_or_an_overspend_fails(
    rows: CanaryRows, live: dict[str, tuple[int, float]] | None, over: int, failed: int
) -> None:
    checks = hostile_checks(with_canaries(rows, live, over))
    assert [i for i, c in enumerate(checks) if not c.passed] == [failed]


def tools_row(**fields: object) -> ToolsRow:
    base: dict[str, object] = {
        "heavy": {200: 4}, "prompt_tokens": 24_040, "openings": CLOSED,
        "estimate_ratio": 1.0, "estimate_n": 356, "p99_ms_without": 100.0,
        "p99_ms_with": 110.0, "ordinary": {200: 352},
    }  # fmt: skip
    return ToolsRow(**(base | fields))  # type: ignore[arg-type]


def page_row(**fields: object) -> PageRow:
    base: dict[str, object] = {
        "page_bytes": 48 * 1024 * 1024, "p99_ms_clean": 107.0, "p99_ms_page": 118.0,
        "requests": (362, 346), "non_200": 0, "scrape_errors": 8, "pages_left_at_mib": 7.6,
    }  # fmt: skip
    return PageRow(**(base | fields))  # type: ignore[arg-type]


def with_engines(tools: ToolsRow, page: PageRow) -> HostileResult:
    return replace(result(run("with", hostile=HOSTILE)), engines=EngineRows(8.0, tools, page))


def test_the_engine_rows_print_target_measured_and_pass() -> None:
    r = with_engines(tools_row(), page_row())
    checks = hostile_checks(r)
    assert [c.passed for c in checks[7:]] == [True] * 4
    assert checks[9].figure == pytest.approx(1.1)  # the ordinary p99, x the run without
    assert checks[10].figure == pytest.approx(118 / 107)
    text = "\n".join(hostile_lines(r))
    assert "| tools-heavy prompts (about 24,040 tokens, 4.1 s of prefill) |" in text
    assert "tools-heavy requests: 4 x 200; breaker openings: fam@int4#0 0, fam@fp16#0 0" in text
    assert "engine's prompt tokens / estimate 1.000 (mean of 356 answers)" in text
    assert "request p99 118 ms, 1.10x the clean page's (107 ms; 346 and 362 requests" in text
    assert "8 scrape errors counted; each page left after 7.6 MiB" in text


@pytest.mark.parametrize(
    ("tools", "page", "failed"),
    [
        (tools_row(openings={"fam@int4#0": 1, "fam@fp16#0": 0}), page_row(), [7]),
        (tools_row(heavy={}), page_row(), [7, 8]),  # no tools-heavy request sent proves nothing
        (tools_row(heavy={200: 3, 504: 1}), page_row(), [8]),
        (tools_row(heavy={200: 3, -1: 1}), page_row(), [8]),  # one never answered
        (tools_row(ordinary={200: 350, 503: 2}), page_row(), [8, 9]),
        (tools_row(p99_ms_with=130.0), page_row(), [9]),  # 1.3x
        (tools_row(), page_row(p99_ms_page=139.0), [10]),  # 1.3x
        (tools_row(), page_row(scrape_errors=0), [10]),  # the page was never refused
        (tools_row(), page_row(non_200=1), [10]),
        (tools_row(), page_row(requests=(362, 0)), [10]),
    ],
)
def test_an_opening_an_unanswered_prompt_or_a_slower_p99_fails(
    tools: ToolsRow, page: PageRow, failed: list[int]
) -> None:
    checks = hostile_checks(with_engines(tools, page))
    assert [i for i, c in enumerate(checks) if not c.passed] == failed


def test_an_unanswered_tools_heavy_request_is_printed_as_such() -> None:
    text = "\n".join(hostile_lines(with_engines(tools_row(heavy={-1: 2}), page_row())))
    assert "tools-heavy requests: 2 x no answer;" in text
