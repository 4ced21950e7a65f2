"""Endpoint health for the proxy: the breaker board and the load tracker behind one face.

Builds the HealthView each decision reads, admits and accounts attempts, and turns breaker
transitions into metrics and log lines. Decisions stay in breaker.py and retry.py.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from data_plane.domain import CompiledTable, HealthView
from data_plane.outcome import Outcome
from data_plane.resilience.breaker import BreakerBoard, BreakerState, Transition
from data_plane.resilience.endpoint_load import LoadTracker
from data_plane.resilience.retry import breaker_success
from data_plane.telemetry.metrics import DataPlaneMetrics

logger = logging.getLogger(__name__)


class Health:
    """Breakers + in-flight/queue load per endpoint id, with `clock` (monotonic seconds)."""

    __slots__ = ("_board", "_clock", "_metrics", "_view", "tracker")

    def __init__(
        self,
        board: BreakerBoard,
        tracker: LoadTracker,
        metrics: DataPlaneMetrics,
        clock: Callable[[], float],
    ) -> None:
        self._board = board
        self.tracker = tracker
        self._metrics = metrics
        self._clock = clock
        self._view = HealthView(frozenset(), tracker.load)

    def view(self) -> HealthView:
        """The snapshot one routing decision reads (the load mapping is live, read at once).
        While the ejected set is the same object (no breaker open: always), so is the view."""
        opened = self._board.open_endpoints(self._clock())
        if opened is not self._view.open_endpoints:
            self._view = HealthView(opened, self.tracker.load, self._view.ladder)
        return self._view

    def set_ladder(self, state: frozenset[tuple[str, str]]) -> None:
        """Keep the precision ladder's state a served decision returned, for the next ones."""
        if state is not self._view.ladder:
            view = self._view
            self._view = HealthView(view.open_endpoints, view.load, state)

    def allow(self, endpoint_id: str) -> bool:
        """May an attempt go to `endpoint_id` now (takes the half-open probe slot if so)."""
        allowed = self._board.allow(endpoint_id, self._clock())
        self._publish(self._board.take_transitions())
        return allowed

    def acquire(self, endpoint_id: str) -> None:
        self.tracker.acquire(endpoint_id)

    def release(self, endpoint_id: str, outcome: Outcome | None) -> None:
        """The attempt ended with `outcome` (None = success): free its slot, feed the breaker."""
        self.tracker.release(endpoint_id)
        success = breaker_success(outcome)
        if success is not None:
            transition = self._board.record(endpoint_id, success, self._clock())
            if transition is not None:
                self._publish((transition,))

    def retry_after_s(self) -> float:
        """What to tell clients when no endpoint is healthy: the breakers' first cooldown."""
        return self._board.config.cooldown_s

    def state(self, endpoint_id: str) -> BreakerState:
        return self._board.state(endpoint_id)

    def on_table(self, table: CompiledTable) -> None:
        """A new table is served: forget endpoints it dropped, export a state for each."""
        ids = [e.id for p in table.pairs for e in p.endpoints]
        self._board.retain(ids)
        self.tracker.forget(set(ids))
        for endpoint_id in ids:
            self._metrics.set_breaker_state(endpoint_id, self._board.state(endpoint_id))
            self._metrics.in_flight.labels(endpoint_id).set(self.tracker.in_flight(endpoint_id))

    def _publish(self, transitions: Iterable[Transition]) -> None:
        for t in transitions:
            self._metrics.circuit_transitions.labels(t.endpoint_id, t.to_state).inc()
            self._metrics.set_breaker_state(t.endpoint_id, t.to_state)
            level = logging.WARNING if t.to_state is BreakerState.OPEN else logging.INFO
            logger.log(
                level,
                "breaker %s -> %s: %s",
                t.from_state,
                t.to_state,
                t.why,
                extra={"endpoint": t.endpoint_id, "outcome": str(t.to_state)},
            )
