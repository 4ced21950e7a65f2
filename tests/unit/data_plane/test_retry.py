"""retry.py: which outcomes retry, attempt/deadline bounds, and the retry budget."""

from __future__ import annotations

import pytest

from data_plane.outcome import (
    BudgetMissed,
    Cancelled,
    ConnectFailed,
    Outcome,
    StreamBroken,
    Timeout,
    UpstreamStatus,
)
from data_plane.resilience.retry import (
    GiveUp,
    Retry,
    RetryBudget,
    breaker_success,
    is_retryable,
    next_step,
)


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.mark.parametrize(
    ("outcome", "retryable", "label", "breaker"),
    [
        (ConnectFailed(), True, "connect_failed", False),
        (Timeout("connect"), True, "timeout_connect", False),
        # first_byte: the engine's OWN deadline (its predicted latency with the policy
        # margin) passed: an engine fault. The client's TTFT budget is BudgetMissed below.
        (Timeout("first_byte"), True, "timeout_first_byte", False),
        # gap: silence past the engine's gap limit; as a failed attempt nothing reached the
        # client yet (a non-streamed body), so the next candidate may answer.
        (Timeout("gap"), True, "timeout_gap", False),
        (Timeout("read"), False, "timeout_read", False),
        (UpstreamStatus(429), True, "status_429", False),
        (UpstreamStatus(502), True, "status_5xx", False),
        (UpstreamStatus(503), True, "status_5xx", False),
        (UpstreamStatus(504), True, "status_5xx", False),
        (UpstreamStatus(500), False, "status_5xx", False),
        (UpstreamStatus(501), False, "status_5xx", False),
        (UpstreamStatus(400), False, "status_4xx", None),
        (UpstreamStatus(404), False, "status_4xx", None),
        (UpstreamStatus(408), False, "status_4xx", None),
        (UpstreamStatus(413), False, "status_4xx", None),
        (StreamBroken(), False, "stream_broken", False),
        (Cancelled(), False, "cancelled", None),
        # The client's TTFT budget passed while the engine was within its own deadline: the
        # next candidate is tried and the engine's breaker learns nothing (issue 13, item 1).
        (BudgetMissed(), True, "ttft_budget_missed", None),
    ],
)
def test_taxonomy(outcome: Outcome, retryable: bool, label: str, breaker: bool | None) -> None:
    assert is_retryable(outcome) is retryable
    assert outcome.label == label
    assert breaker_success(outcome) is breaker


def test_success_is_recorded_as_success() -> None:
    assert breaker_success(None) is True


def test_next_step_retries_retryable_outcomes() -> None:
    assert next_step(ConnectFailed(), 1, 5.0, 3) == Retry("connect_failed")
    assert next_step(UpstreamStatus(503), 2, 5.0, 3) == Retry("status_5xx")


def test_next_step_never_retries_the_rest() -> None:
    step = next_step(UpstreamStatus(400), 1, 5.0, 3)
    assert step == GiveUp("status_4xx is not retryable")
    assert isinstance(next_step(StreamBroken(), 1, 5.0, 3), GiveUp)
    assert isinstance(next_step(Cancelled(), 1, 5.0, 3), GiveUp)
    assert isinstance(next_step(Timeout("read"), 1, 5.0, 3), GiveUp)


def test_next_step_bounded_by_attempts() -> None:
    assert next_step(ConnectFailed(), 3, 5.0, 3) == GiveUp("3 of 3 attempts used")
    assert next_step(ConnectFailed(), 1, 5.0, 1) == GiveUp("1 of 1 attempts used")


def test_next_step_bounded_by_the_deadline() -> None:
    assert next_step(ConnectFailed(), 1, 0.05, 3) == GiveUp("0.050 s left of the deadline")
    assert next_step(ConnectFailed(), 1, -1.0, 3) == GiveUp("0.000 s left of the deadline")
    assert next_step(ConnectFailed(), 1, 0.2, 3, min_remaining_s=0.5) == GiveUp(
        "0.200 s left of the deadline"
    )
    assert isinstance(next_step(ConnectFailed(), 1, 0.06, 3), Retry)


def test_retry_budget_allows_the_floor_on_a_quiet_process() -> None:
    clock = FakeClock()
    budget = RetryBudget(clock, ratio=0.2, min_per_s=0.5, window_s=10.0)
    assert budget.available() == 5.0
    assert [budget.try_spend() for _ in range(6)] == [True] * 5 + [False]
    assert budget.available() == 0.0


def test_retry_budget_scales_with_requests() -> None:
    clock = FakeClock()
    budget = RetryBudget(clock, ratio=0.2, min_per_s=0.0, window_s=10.0)
    for _ in range(50):
        budget.record_request()
    spent = sum(budget.try_spend() for _ in range(20))
    assert spent == 10  # 20% of 50


def test_retry_budget_window_slides() -> None:
    clock = FakeClock()
    budget = RetryBudget(clock, ratio=0.5, min_per_s=0.0, window_s=10.0, buckets=10)
    for _ in range(10):
        budget.record_request()
    assert sum(budget.try_spend() for _ in range(10)) == 5
    clock.advance(5.0)
    assert not budget.try_spend()  # still inside the window
    clock.advance(5.0)  # the first bucket has left the window
    assert budget.available() == 0.0
    for _ in range(4):
        budget.record_request()
    assert budget.available() == 2.0
    assert budget.try_spend()


def test_retry_budget_storm_is_capped() -> None:
    clock = FakeClock()
    budget = RetryBudget(clock)  # 20% + 1/s over 10 s
    allowed = 0
    for _ in range(100):  # 100 requests, each failing and wanting 3 retries, over 10 s
        budget.record_request()
        allowed += sum(budget.try_spend() for _ in range(3))
        clock.advance(0.1)
    assert allowed <= 0.2 * 100 + 10 + 1
    assert allowed >= 20


@pytest.mark.parametrize(
    "kwargs",
    [{"ratio": -0.1}, {"ratio": 1.5}, {"min_per_s": -1}, {"window_s": 0}, {"buckets": 0}],
)
def test_retry_budget_validation(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="retry budget needs"):
        RetryBudget(FakeClock(), **kwargs)  # type: ignore[arg-type]
