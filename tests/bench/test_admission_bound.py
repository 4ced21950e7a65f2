"""bench/admission/bound.py: the simulation behind section 9's bounds models the bench's
engines (their latency alone and at the budget's concurrency) and its routers shed as named."""

from __future__ import annotations

import pytest

from bench.admission.bound import SLOTS, lined, router, simulate
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
