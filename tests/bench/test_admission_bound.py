"""bench/admission/bound.py: the simulation behind section 9's bounds models the bench's
engines (their latency alone and at the budget's concurrency) and its routers shed as named."""

from __future__ import annotations

import pytest

from bench.admission.bound import ROUTERS, SLOTS, adaptive, lined, router, simulate
from bench.admission.burst import Arrival, engine_latency_s


def test_the_engine_model_is_the_simulators() -> None:
    """8 sent at once to one engine take engine_latency_s(8) = 0.39 s, within 400 ms; 9 take
    0.42 s, past it."""
    one = Arrival(0.0, "t", "standard", False)
    assert SLOTS == 8
    assert engine_latency_s(8) == pytest.approx(0.39)
    assert all(ok for _, ok in simulate(lambda a, loads, burst: 0, [one] * SLOTS, False))
    assert not any(ok for _, ok in simulate(lambda a, loads, burst: 0, [one] * 9, False))


def test_routers_shed_sheddable_requests_only_in_the_burst_run() -> None:
    shed_bursty = router(lambda a: a.tenant == "bursty", False, True)
    bursty = Arrival(1.0, "bursty", "standard", True)
    assert shed_bursty(bursty, [0, 0], True) is None
    assert shed_bursty(bursty, [0, 0], False) == 0
    assert shed_bursty(Arrival(1.0, "bursty", "critical", True), [8, 8], True) == 0
    assert shed_bursty(Arrival(1.0, "steady", "batch", True), [8, 8], True) is None
    assert router(lambda a: False, True, False)(bursty, [5, 2], True) == 1


def test_class_lines_keep_the_slots_above_a_lower_class_for_the_ones_above() -> None:
    decide = lined({"critical": SLOTS, "standard": 6, "batch": 4})
    at = Arrival(1.0, "steady", "standard", False)
    assert decide(at, [5, 0], False) == 0
    assert decide(at, [6, 5], False) == 1
    assert decide(at, [6, 6], True) is None
    assert decide(Arrival(1.0, "steady", "batch", False), [4, 3], False) == 1
    assert decide(Arrival(1.0, "steady", "critical", False), [6, 6], True) == 0
    assert decide(Arrival(1.0, "steady", "critical", False), [9, 8], True) == 1


def test_the_adaptive_lines_shed_a_standard_request_once_the_critical_rate_leaves_no_room() -> None:
    """Lines 8 / 6 / 4 less the critical class's last second: 26 critical arrivals in the
    last second hold 26 x 0.39 s / 2 engines = 5.07 slots per engine, so the standard line
    is 8 - 5.07 = 2.93 (a standard request joins 1 in flight, not 2); without them it
    stays 6."""
    lines = {"critical": SLOTS, "standard": 6, "batch": 4}
    standard = Arrival(1.0, "steady", "standard", False)
    assert adaptive(lines)(standard, [5, 5], False) == 0
    busy = adaptive(lines)
    for k in range(26):
        assert busy(Arrival(0.05 + k * 0.03, "bursty", "critical", True), [0, 0], True) == 0
    assert busy(standard, [1, 1], False) == 0
    assert busy(standard, [2, 2], False) is None
    assert busy(Arrival(1.0, "steady", "critical", False), [7, 7], False) == 0
    # A second later the burst is out of the window: the static line again.
    assert busy(Arrival(2.5, "steady", "standard", False), [5, 5], False) == 0


def test_every_router_the_bounds_run_is_built_afresh_per_simulation() -> None:
    """The adaptive routers count arrivals: each run gets its own (no count carried over)."""
    assert all(build() is not build() for build in ROUTERS.values())
