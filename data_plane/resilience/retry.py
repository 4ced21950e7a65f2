"""Retry policy: `next_step`, what a breaker learns from an outcome, and the retry budget.

PURE: the only place that decides whether a failed attempt is retried (docs/style.md, section 8).
Time enters only through an injected clock. No I/O, no sleeping: a retry goes to the next
endpoint or pair at once, so there is no backoff delay to wait out.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from data_plane.outcome import (
    BudgetMissed,
    Cancelled,
    ConnectFailed,
    Outcome,
    ResponseTooLarge,
    Timeout,
    UpstreamStatus,
)

Clock = Callable[[], float]  # monotonic seconds
RETRYABLE_STATUSES = frozenset({429, 502, 503, 504})


@dataclass(frozen=True, slots=True)
class Retry:
    """Try the next endpoint (then the next pair) now; `reason` is the failed outcome's label."""

    reason: str


@dataclass(frozen=True, slots=True)
class GiveUp:
    """Stop: `reason` says why (not retryable, attempts or time used up)."""

    reason: str


def is_retryable(outcome: Outcome) -> bool:
    """Retry only failures that happened before the first byte and may differ elsewhere."""
    match outcome:
        case ConnectFailed() | BudgetMissed():
            return True
        case UpstreamStatus(code=code):
            return code in RETRYABLE_STATUSES
        case Timeout(phase=phase):
            return phase != "read"
        case ResponseTooLarge(part=part):  # a huge body may be what the request asked for
            return part == "head"
        case _:  # StreamBroken (bytes already went out) or Cancelled (the client left)
            return False


def next_step(
    outcome: Outcome,
    attempt: int,
    remaining_s: float,
    max_attempts: int,
    *,
    min_remaining_s: float = 0.05,
) -> Retry | GiveUp:
    """Decide after attempt number `attempt` (1-based) failed with `outcome`.

    Retry when the outcome is retryable, fewer than `max_attempts` attempts were made and more
    than `min_remaining_s` of the request's deadline is left (a retry that cannot finish only
    adds load). The retry budget is checked separately by the caller (`RetryBudget`).
    """
    if not is_retryable(outcome):
        return GiveUp(f"{outcome.label} is not retryable")
    if attempt >= max_attempts:
        return GiveUp(f"{attempt} of {max_attempts} attempts used")
    if remaining_s <= min_remaining_s:
        return GiveUp(f"{max(remaining_s, 0.0):.3f} s left of the deadline")
    return Retry(outcome.label)


def breaker_success(outcome: Outcome | None) -> bool | None:
    """What the endpoint's breaker should record: True (success, `None` outcome), False or
    None (nothing).

    Evidence model (docs/reliability.md, "What a breaker counts"): False only for what the
    engine alone explains: connect errors and resets (nothing listens), 5xx and 429 (the engine
    said it failed or is full), broken or stalled streams, and lack of progress judged per
    endpoint over time (`Timeout("first_byte")`: the endpoint stalled, the model in
    `data_plane.progress`), including
    silence mid-answer past its gap limit (`Timeout("gap")`: a batch stalled by other prefills
    or a preemption could explain a short one, which the floor covers; a slow client is never
    timed). None for what the client explains: a cancel, a missed client limit
    (`BudgetMissed`), the request's deadline (never an outcome here), and other 4xx (the
    request's own fault)."""
    match outcome:
        case None:
            return True
        case UpstreamStatus(code=code):
            return None if code < 500 and code != 429 else False
        case Cancelled() | BudgetMissed():
            return None
        case _:
            return False


class RetryBudget:
    """Caps retries at `ratio` of the requests seen in a sliding window, plus a floor of
    `min_per_s` retries per second so a quiet process can still retry (Finagle-style).

    Call `record_request()` once per client request and `try_spend()` before each retry;
    a False from `try_spend()` means: give up now, the fleet is already being retried hard.
    """

    def __init__(
        self,
        clock: Clock,
        *,
        ratio: float = 0.2,
        min_per_s: float = 1.0,
        window_s: float = 10.0,
        buckets: int = 10,
    ) -> None:
        if not 0.0 <= ratio <= 1.0 or min_per_s < 0 or window_s <= 0 or buckets < 1:
            raise ValueError("retry budget needs 0<=ratio<=1, min_per_s>=0, window_s>0")
        self._clock = clock
        self._ratio = ratio
        self._floor = min_per_s * window_s
        self._width_s = window_s / buckets
        self._buckets = buckets
        # (bucket index, requests, retries), oldest first; at most `buckets` entries.
        self._window: deque[list[int]] = deque()

    def _current(self) -> list[int]:
        index = math.floor(self._clock() / self._width_s)
        window = self._window
        while window and window[0][0] <= index - self._buckets:
            window.popleft()
        if not window or window[-1][0] != index:
            window.append([index, 0, 0])
        return window[-1]

    def record_request(self) -> None:
        self._current()[1] += 1

    def try_spend(self) -> bool:
        """Take one retry from the budget if it allows; returns whether it did."""
        bucket = self._current()
        requests = sum(b[1] for b in self._window)
        retries = sum(b[2] for b in self._window)
        if retries + 1 > self._ratio * requests + self._floor:
            return False
        bucket[2] += 1
        return True

    def available(self) -> float:
        """Retries the budget would still allow now (for metrics and tests)."""
        self._current()
        requests = sum(b[1] for b in self._window)
        retries = sum(b[2] for b in self._window)
        return max(0.0, self._ratio * requests + self._floor - retries)
