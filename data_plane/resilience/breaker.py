"""Circuit breakers, one per endpoint: a pure state machine with `now` passed in.

closed -> open after K consecutive failures or a failure ratio over a sliding window (with a
minimum of requests); open -> half-open once a cooldown has passed (the cooldown doubles on each
re-open, up to a cap); half-open admits ONE probe; probe success -> closed (cooldown reset),
probe failure -> open. No clock, no I/O: transitions are returned for metrics and logs.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from contracts.live_state import BREAKER_STATE_LEVEL
from data_plane.settings import BreakerConfig


class BreakerState(StrEnum):
    """Values match `contracts.live_state.BreakerState`; `level` is the metric gauge value."""

    CLOSED = "closed"
    HALF_OPEN = "half_open"
    OPEN = "open"

    @property
    def level(self) -> int:
        """gearbox_circuit_state: 0 closed, 1 half-open, 2 open (`BREAKER_STATE_LEVEL`)."""
        return BREAKER_STATE_LEVEL[self.value]


_NONE: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Transition:
    endpoint_id: str
    from_state: BreakerState
    to_state: BreakerState
    at: float  # the `now` it happened at
    why: str  # operator words, e.g. "5 consecutive failures"


@dataclass(slots=True)
class _Breaker:
    """Mutable state of one endpoint's breaker (owned by the board, never shared)."""

    state: BreakerState = BreakerState.CLOSED
    consecutive: int = 0
    window: deque[list[int]] = field(default_factory=deque)  # [bucket, requests, failures]
    requests: int = 0  # totals over `window`, kept as buckets come and go
    failures: int = 0
    opened_at: float = 0.0
    cooldown_s: float = 0.0
    probe_started: float = 0.0  # half-open: when the (last) probe was admitted


class BreakerBoard:
    """All endpoints' breakers, keyed by endpoint id; unknown ids start closed."""

    def __init__(self, config: BreakerConfig | None = None, window_buckets: int = 10) -> None:
        """`config`: the knobs (`settings.breaker`); `window_buckets`: how finely the
        ratio's sliding window is cut."""
        if window_buckets < 1:
            raise ValueError("window_buckets must be >= 1")
        self._config = config or BreakerConfig()
        self._window_buckets = window_buckets
        self._breakers: dict[str, _Breaker] = {}
        self._pending: list[Transition] = []
        self._unsettled: set[str] = set()  # endpoints whose breaker is not closed

    @property
    def config(self) -> BreakerConfig:
        return self._config

    def _get(self, endpoint_id: str) -> _Breaker:
        b = self._breakers.get(endpoint_id)
        if b is None:
            b = self._breakers[endpoint_id] = _Breaker(cooldown_s=self._config.cooldown_s)
        return b

    def state(self, endpoint_id: str) -> BreakerState:
        """The stored state (an open breaker whose cooldown passed turns half-open on `allow`)."""
        b = self._breakers.get(endpoint_id)
        return BreakerState.CLOSED if b is None else b.state

    def cooldown_s(self, endpoint_id: str) -> float:
        """The endpoint's current open period (doubles on each re-open)."""
        b = self._breakers.get(endpoint_id)
        return self._config.cooldown_s if b is None else b.cooldown_s

    def allow(self, endpoint_id: str, now: float) -> bool:
        """May an attempt go to this endpoint now? Admitting the half-open probe counts as
        taking the slot: until it is recorded (or times out) other callers see False."""
        b = self._breakers.get(endpoint_id)
        if b is None or b.state is BreakerState.CLOSED:
            return True
        if b.state is BreakerState.OPEN:
            if now < b.opened_at + b.cooldown_s:
                return False
            self._move(endpoint_id, b, BreakerState.HALF_OPEN, now, "cooldown elapsed")
        elif now < b.probe_started + self._config.probe_timeout_s:
            return False  # the probe is out; everyone else waits for its result
        b.probe_started = now
        return True

    def release_probe(self, endpoint_id: str) -> None:
        """Give back the half-open probe slot `allow` took for an attempt that was never sent
        (the retry budget refused it): the next caller may probe at once."""
        b = self._breakers.get(endpoint_id)
        if b is not None and b.state is BreakerState.HALF_OPEN:
            b.probe_started = -math.inf

    def record(self, endpoint_id: str, success: bool, now: float) -> Transition | None:
        """Account one finished attempt; returns the transition it caused, if any."""
        b = self._get(endpoint_id)
        if b.state is BreakerState.HALF_OPEN:
            return self._probe_result(endpoint_id, b, success, now)
        if b.state is BreakerState.OPEN:
            return None  # stragglers sent before it opened say nothing new
        self._count(b, success, now)
        why = self._trip_reason(b)
        if why is None:
            return None
        b.opened_at = now
        return self._move(endpoint_id, b, BreakerState.OPEN, now, why)

    def trip(self, endpoint_id: str, now: float, why: str) -> Transition | None:
        """Open the breaker now on a failure that alone is strong evidence (a hung engine's
        silence, `progress.stall`): counted as a failure, and an open one stays as it is;
        a half-open one treats it as its probe's failure."""
        b = self._get(endpoint_id)
        if b.state is BreakerState.HALF_OPEN:
            return self._probe_result(endpoint_id, b, False, now)
        if b.state is BreakerState.OPEN:
            return None
        self._count(b, False, now)
        b.opened_at = now
        return self._move(endpoint_id, b, BreakerState.OPEN, now, why)

    def open_endpoints(self, now: float) -> frozenset[str]:
        """Endpoints routing must skip now: open within their cooldown, or half-open with the
        probe already out. An open endpoint whose cooldown passed is routable (for its probe).
        Only breakers that are not closed are looked at (usually none: the same empty set)."""
        if not self._unsettled:
            return _NONE
        return frozenset(eid for eid in self._unsettled if self._skipped(self._breakers[eid], now))

    def _skipped(self, b: _Breaker, now: float) -> bool:
        if b.state is BreakerState.OPEN:
            return now < b.opened_at + b.cooldown_s
        return b.state is BreakerState.HALF_OPEN and now < b.probe_started + (
            self._config.probe_timeout_s
        )

    def take_transitions(self) -> tuple[Transition, ...]:
        """Transitions made inside `allow` (open -> half-open) since the last call.

        `record` returns its own transition directly; count both for the full picture.
        """
        if not self._pending:
            return ()
        taken, self._pending = tuple(self._pending), []
        return taken

    def retain(self, endpoint_ids: Iterable[str]) -> None:
        """Forget endpoints no longer in the table (keeps the board bounded)."""
        keep = set(endpoint_ids)
        for eid in [e for e in self._breakers if e not in keep]:
            del self._breakers[eid]
            self._unsettled.discard(eid)

    def start_half_open(self, endpoint_ids: Iterable[str], now: float) -> list[Transition]:
        """New endpoints (pods that just appeared) start half-open: their first attempt is a
        probe, and they take full traffic once it succeeds."""
        moved = []
        for endpoint_id in endpoint_ids:
            b = self._get(endpoint_id)
            if b.state is BreakerState.CLOSED and b.requests == 0:
                b.probe_started = -math.inf  # the probe slot is free
                moved.append(
                    self._move(endpoint_id, b, BreakerState.HALF_OPEN, now, "new endpoint")
                )
        if moved:  # returned here, not left for take_transitions
            del self._pending[-len(moved) :]
        return moved

    def _probe_result(self, endpoint_id: str, b: _Breaker, success: bool, now: float) -> Transition:
        if success:
            b.cooldown_s = self._config.cooldown_s
            b.consecutive = 0
            b.window.clear()
            b.requests = b.failures = 0
            return self._move(endpoint_id, b, BreakerState.CLOSED, now, "probe succeeded")
        b.cooldown_s = min(b.cooldown_s * 2, self._config.max_cooldown_s)
        b.opened_at = now
        why = f"probe failed; next cooldown {b.cooldown_s:g} s"
        return self._move(endpoint_id, b, BreakerState.OPEN, now, why)

    def _count(self, b: _Breaker, success: bool, now: float) -> None:
        cfg = self._config
        buckets = self._window_buckets
        width_s = cfg.window_s / buckets
        index = math.floor(now / width_s)
        window = b.window
        while window and window[0][0] <= index - buckets:
            _, requests, failures = window.popleft()
            b.requests -= requests
            b.failures -= failures
        if not window or window[-1][0] != index:
            window.append([index, 0, 0])
        window[-1][1] += 1
        b.requests += 1
        if success:
            b.consecutive = 0
        else:
            window[-1][2] += 1
            b.failures += 1
            b.consecutive += 1

    def _trip_reason(self, b: _Breaker) -> str | None:
        cfg = self._config
        if b.consecutive >= cfg.consecutive_failures:
            return f"{b.consecutive} consecutive failures"
        requests, failures = b.requests, b.failures
        if requests >= cfg.min_requests and failures >= cfg.failure_ratio * requests:
            return f"{failures} of {requests} requests failed in {cfg.window_s:g} s"
        return None

    def _move(
        self, endpoint_id: str, b: _Breaker, to: BreakerState, now: float, why: str
    ) -> Transition:
        transition = Transition(endpoint_id, b.state, to, now, why)
        b.state = to
        if to is BreakerState.CLOSED:
            self._unsettled.discard(endpoint_id)
        else:
            self._unsettled.add(endpoint_id)
        if to is BreakerState.HALF_OPEN:
            self._pending.append(transition)
        return transition
