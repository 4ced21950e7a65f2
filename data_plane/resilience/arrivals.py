"""Work arriving per pair in this process: each request's predicted seconds, as an
exponentially weighted rate, which is the concurrency that traffic keeps in flight (Little's
law); what `decision.capacity` compares with what the pairs sustain to tell overload from a
moment at full concurrency. Event-loop thread only; the clock is injected."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from data_plane.decision.capacity import WORK_WINDOW_S


class Arrivals:
    """pair -> (seconds of work arriving a second as of `at`, at); read through
    `capacity.decayed`."""

    __slots__ = ("_all", "_clock", "_work")

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._work: dict[str, tuple[float, float]] = {}
        self._all = (0.0, clock())

    def now(self) -> float:
        return self._clock()

    def arrived(self, pair: str, work_s: float) -> None:
        """A request of `work_s` predicted seconds sent (or shed) at `pair`: the rate decays
        over WORK_WINDOW_S and gains work_s / WORK_WINDOW_S (λ requests a second of W seconds
        each settle at λ W)."""
        now = self._clock()
        self._work[pair] = _add(self._work.get(pair, (0.0, now)), work_s, now)
        self._all = _add(self._all, work_s, now)

    def raw(self) -> Mapping[str, tuple[float, float]]:
        return self._work

    def all_pairs(self) -> tuple[float, float]:
        """The work arriving at every pair together (raw, as `raw`'s values)."""
        return self._all


def _add(raw: tuple[float, float], work_s: float, now: float) -> tuple[float, float]:
    value, at = raw
    value *= math.exp(-max(0.0, now - at) / WORK_WINDOW_S)
    return (value + work_s / WORK_WINDOW_S, now)
