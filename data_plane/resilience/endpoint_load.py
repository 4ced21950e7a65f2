"""Load per endpoint: requests in flight from this process plus the engine's scraped queue.

`load` is one live mapping, updated in place on every change, so building a HealthView per
request costs nothing; `choose_route` reads it synchronously. The engine's scraped count
(waiting + running) already includes this process's own requests that had reached it, so
only the rest of it (other replicas' and other clients' requests) is added to the in-flight
count: a request is never counted twice (docs/data_plane.md "Load").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping


class LoadTracker:
    """In-flight counts (this process) and queue depths (scraped) per endpoint id."""

    __slots__ = ("_in_flight", "_load", "_on_in_flight", "_others", "_queue")

    def __init__(self, on_in_flight: Callable[[str, int], None] | None = None) -> None:
        self._in_flight: dict[str, int] = {}
        self._queue: dict[str, float] = {}
        self._others: dict[str, float] = {}  # the scraped count less this process's share
        self._load: dict[str, float] = {}
        self._on_in_flight = on_in_flight

    @property
    def load(self) -> Mapping[str, float]:
        """endpoint id -> in-flight + queue depth (missing = 0)."""
        return self._load

    def in_flight(self, endpoint_id: str) -> int:
        return self._in_flight.get(endpoint_id, 0)

    def in_flight_all(self) -> Mapping[str, int]:
        return self._in_flight

    def queue_depth(self, endpoint_id: str) -> float | None:
        return self._queue.get(endpoint_id)

    def acquire(self, endpoint_id: str) -> None:
        """One more request in flight at `endpoint_id`; pair with `release` in a finally."""
        self._set_in_flight(endpoint_id, self._in_flight.get(endpoint_id, 0) + 1)

    def release(self, endpoint_id: str) -> None:
        self._set_in_flight(endpoint_id, max(0, self._in_flight.get(endpoint_id, 0) - 1))

    def set_queue_depth(self, endpoint_id: str, depth: float, own: int | None = None) -> None:
        """Record the scraped waiting + running count of an engine. `own` = how many of this
        process's requests the count includes (default: those in flight now); they are
        already in the in-flight count, so load = in flight + max(0, depth - own)."""
        mine = self._in_flight.get(endpoint_id, 0) if own is None else own
        self._queue[endpoint_id] = depth
        others = self._others[endpoint_id] = max(0.0, depth - mine)
        self._load[endpoint_id] = self._in_flight.get(endpoint_id, 0) + others

    def forget(self, keep: set[str]) -> None:
        """Drop queue depths of endpoints no longer in the table (in-flight ones drain)."""
        for endpoint_id in [e for e in self._queue if e not in keep]:
            del self._queue[endpoint_id]
            del self._others[endpoint_id]
            self._load[endpoint_id] = float(self._in_flight.get(endpoint_id, 0))

    def _set_in_flight(self, endpoint_id: str, count: int) -> None:
        self._in_flight[endpoint_id] = count
        self._load[endpoint_id] = count + self._others.get(endpoint_id, 0.0)
        if self._on_in_flight is not None:
            self._on_in_flight(endpoint_id, count)
