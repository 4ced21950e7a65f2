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

    __slots__ = ("_board", "_clock", "_metrics", "_on_open", "_remote", "_view", "tracker")

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
        self._remote: dict[str, float] = {}  # endpoint -> until (monotonic): ejected elsewhere
        self._on_open: Callable[[str, float], None] | None = None

    def view(self) -> HealthView:
        """The snapshot one routing decision reads (the load mapping is live, read at once).
        Skipped: this replica's open breakers and what other replicas announced (`eject_for`).
        While the skipped set stays equal (nothing open: always), so does the view object."""
        now = self._clock()
        opened = self._board.open_endpoints(now)
        if self._remote:
            opened = opened | self._remote_ejected(now)
        if opened != self._view.open_endpoints:
            self._view = HealthView(opened, self.tracker.load, self._view.ladder)
        return self._view

    def on_open(self, listener: Callable[[str, float], None]) -> None:
        """Call `listener(endpoint_id, cooldown_s)` when a breaker here opens (announcements)."""
        self._on_open = listener

    def eject_for(self, endpoint_id: str, seconds: float) -> None:
        """Skip `endpoint_id` for `seconds` because another replica's breaker opened on it;
        this replica's own breaker is left as it is."""
        until = self._clock() + seconds
        if until > self._remote.get(endpoint_id, 0.0):
            self._remote[endpoint_id] = until

    def _remote_ejected(self, now: float) -> frozenset[str]:
        for endpoint_id in [e for e, until in self._remote.items() if until <= now]:
            del self._remote[endpoint_id]
        return frozenset(self._remote)

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

    def release_probe(self, endpoint_id: str) -> None:
        """`allow` said yes but no attempt was sent: free a half-open probe slot it took."""
        self._board.release_probe(endpoint_id)

    def acquire(self, endpoint_id: str) -> None:
        self.tracker.acquire(endpoint_id)

    def release(self, endpoint_id: str, outcome: Outcome | None, counted: bool = True) -> None:
        """The attempt ended with `outcome` (None = success): free its slot, feed the breaker
        what the outcome says about the engine (`retry.breaker_success`), unless not `counted`
        (an attempt a stall ended: the stall itself was counted once, `stalled`)."""
        self.tracker.release(endpoint_id)
        success = breaker_success(outcome) if counted else None
        if success is not None:
            transition = self._board.record(endpoint_id, success, self._clock())
            if transition is not None:
                self._publish((transition,))

    def stalled(self, endpoint_id: str, hung: bool) -> None:
        """The endpoint stalled: one breaker failure, or, `hung`, the breaker opens at once
        (the rule and what else could explain a stall: the model in `data_plane.progress`)."""
        now = self._clock()
        if hung:
            why = "hung: no byte on any attempt for PROGRESS_OPEN_WINDOWS stall windows"
            transition = self._board.trip(endpoint_id, now, why)
        else:
            transition = self._board.record(endpoint_id, False, now)
        if transition is not None:
            self._publish((transition,))

    def hung(self, endpoint_id: str) -> None:
        """The endpoint's own token counters moved not at all, or its `/metrics` answered neither
        read, across `PROGRESS_STILL_WINDOWS` windows while our attempts waited there overdue
        (`progress.stillness`): it had work and did none, for anyone, so its breaker opens at
        once. What else could explain that: one engine step longer than that span (a prefill far
        beyond the profile, which vLLM counts only at its end; cores starved past it), or a
        process too slow to serve `/metrics` within its timeout, twice."""
        why = (
            "hung: its token counters did not move (or /metrics did not answer)"
            " across PROGRESS_STILL_WINDOWS windows"
        )
        transition = self._board.trip(endpoint_id, self._clock(), why)
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
            self._metrics.set_breaker_state(endpoint_id, self._board.state(endpoint_id).level)
            self._metrics.in_flight.labels(endpoint_id).set(self.tracker.in_flight(endpoint_id))

    def probation(self, endpoint_ids: Iterable[str]) -> None:
        """Endpoints that just appeared join half-open (see `BreakerBoard.start_half_open`)."""
        self._publish(self._board.start_half_open(endpoint_ids, self._clock()))

    def _publish(self, transitions: Iterable[Transition]) -> None:
        for t in transitions:
            if t.to_state is BreakerState.OPEN and self._on_open is not None:
                self._on_open(t.endpoint_id, self._board.cooldown_s(t.endpoint_id))
            self._metrics.circuit_transitions.labels(t.endpoint_id, t.to_state).inc()
            self._metrics.set_breaker_state(t.endpoint_id, t.to_state.level)
            level = logging.WARNING if t.to_state is BreakerState.OPEN else logging.INFO
            logger.log(
                level,
                "breaker %s -> %s: %s",
                t.from_state,
                t.to_state,
                t.why,
                extra={"endpoint": t.endpoint_id, "outcome": str(t.to_state)},
            )
