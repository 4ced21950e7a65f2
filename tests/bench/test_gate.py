"""bench/overhead/gate.py (CI's overhead gate): the ratio of medians per mode and connection
count, the verdict at 64 connections, and the slowed variant it is shown to fail on."""

from __future__ import annotations

import time

import pytest

from bench.common.dp_variant import SLOWED_US, SlowedMetrics, variant_deps
from bench.overhead.gate import GATE_RATIO, gate_rows, gate_table
from bench.overhead.section import TargetRun
from bench.overhead.wrk import ClosedLoopResult


def closed(conns: int, rps: float, cpu: float | None = None) -> ClosedLoopResult:
    return ClosedLoopResult(conns, int(rps * 2), 2.0, rps, 1.0, 1.5, 2.0, 1.0, 2.0, 0, cpu)


def rounds(
    minimal: tuple[float, float], gearbox: tuple[float, float], stream: bool
) -> list[TargetRun]:
    """Two rounds; each target gives `rps` at 64 connections and twice it at 1."""
    runs = []
    for round_, (m, g) in enumerate(zip(minimal, gearbox, strict=True)):
        runs.append(
            TargetRun(
                "minimal", "m", stream, (closed(1, 2 * m, 300), closed(64, m, 280)), round=round_
            )
        )
        runs.append(
            TargetRun(
                "gearbox", "g", stream, (closed(1, 2 * g, 600), closed(64, g, 500)), round=round_
            )
        )
    return runs


def test_the_ratio_is_of_the_medians_of_one_run() -> None:
    runs = rounds((4000, 3000), (2000, 2000), False) + rounds((4000, 4000), (3000, 2600), True)
    rows = {(r.stream, r.connections): r for r in gate_rows(runs)}
    plain, streaming = rows[False, 64], rows[True, 64]
    assert plain.minimal_rps == 3500
    assert plain.gearbox_rps == 2000
    assert plain.ratio == pytest.approx(2000 / 3500)
    assert streaming.ratio == pytest.approx(2800 / 4000)
    assert (plain.minimal_cpu_us, plain.gearbox_cpu_us) == (280, 500)
    assert all(r.passed for r in rows.values())


def test_either_mode_below_the_threshold_at_64_connections_fails() -> None:
    slid = 0.5 * GATE_RATIO * 4000
    runs = rounds((4000, 4000), (3000, 3000), False) + rounds((4000, 4000), (slid, slid), True)
    rows = gate_rows(runs)
    failed = [(r.stream, r.connections) for r in rows if not r.passed]
    assert failed == [(True, 64)]
    table = gate_table(rows)
    assert f"< {GATE_RATIO:.2f}" in table
    assert "| streaming | 64 |" in table


def test_one_connection_is_shown_but_not_gated() -> None:
    runs = rounds((4000, 4000), (3000, 3000), False) + rounds((4000, 4000), (3000, 3000), True)
    runs = [r for r in runs if not (r.target == "gearbox" and r.stream)]  # streaming Gearbox failed
    rows = {(r.stream, r.connections): r for r in gate_rows(runs)}
    assert rows[True, 1].passed
    assert rows[True, 1].ratio is None
    assert not rows[True, 64].passed  # unmeasured: never a pass


def test_the_slowed_variant_spends_its_busy_loop_per_decision() -> None:
    deps = variant_deps("slowed", None)
    assert isinstance(deps.metrics, SlowedMetrics)
    start = time.perf_counter_ns()
    for _ in range(10):
        deps.metrics.count_decision("p", "cheapest_feasible", "chat", 0.5)
    assert time.perf_counter_ns() - start >= 10 * SLOWED_US * 1000
    assert deps.metrics.decisions.labels("p", "cheapest_feasible").value == 10
