"""Ends attempts at a stalled endpoint: `progress.stall.StallWatch` on one loop timer.

An attempt registers while it waits for its first progress (`StallGuard.waiting`); the guard
keeps ONE timer, armed at the soonest time any endpoint could stall, and when the watch says an
endpoint stalled it tells the breakers once (`on_stall(endpoint, hung)`: one failure, or open
now) and cancels the tasks of its overdue attempts that have somewhere else to go, marking them
`stalled`, so the attempt (`AttemptRunner.run`) turns that cancellation into lack of progress
(`Timeout("first_byte")`, not counted again by the breaker) and the proxy tries the next
candidate. Why a stall is the engine's fault, and what else could explain it, is the
package's model (`data_plane.progress`).

With a probe (`set_probe`: `progress.engine_probe`, one bounded GET of the engine's `/metrics`),
the guard also reads the counters of an endpoint where attempts wait overdue when the watch
says so (`StallWatch.probes_due`), each read a task of its own, at most one per endpoint, off
every request's path; a reading that shows the hang (`progress.stillness`) ends its overdue
attempts and opens its breaker as the windows' hang does.

A cancellation lands only at the await the attempt waits on (the upstream client's send, a
stream's first chunk, a non-streamed body): the attempt stops waiting (`arrived`, `done`) at
once when that await returns, with no await in between, and the guard cancels only attempts
still waiting. The request deadline and a client's disconnect cancel the same task; the
attempt gives back only the guard's own cancellation (`Task.uncancel`) and lets theirs through.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable

from contracts.task_stop import STOP_GRACE_S, stop_tasks, where
from data_plane.progress.stall import StallWatch, Waiter
from data_plane.progress.stillness import Reading, Unread

logger = logging.getLogger(__name__)
# One endpoint's token counters, read (never raises but for a cancellation).
Probe = Callable[[str], Awaitable[Reading]]


class Wait:
    """One attempt's registration while it waits; `stalled` once the guard ended it."""

    __slots__ = ("endpoint_id", "stalled", "task")

    def __init__(self, endpoint_id: str, task: asyncio.Task[object] | None) -> None:
        self.endpoint_id = endpoint_id
        self.task = task
        self.stalled = False


def loop_time() -> float:
    """The running loop's clock: the one its timers keep."""
    return asyncio.get_running_loop().time()


class StallGuard:
    """The watch, its one timer, and the clock both read (the loop's by default: the silence
    is real time the engine took, whatever clock the rest of the app is given)."""

    __slots__ = (
        "_clock",
        "_probe",
        "_probes",
        "_timer",
        "_timer_at",
        "on_hang",
        "on_stall",
        "watch",
    )

    def __init__(self, watch: StallWatch, clock: Callable[[], float] = loop_time) -> None:
        self.watch = watch
        self._clock = clock
        # (endpoint, hung) once per stall: the breakers' account (`Health.stalled`)
        self.on_stall: Callable[[str, bool], None] | None = None
        # (endpoint) when its counters show the hang: open its breaker (`Health.hung`)
        self.on_hang: Callable[[str], None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = float("inf")  # on `clock`
        self._probe: Probe | None = None
        self._probes: dict[str, asyncio.Task[None]] = {}  # the reads in flight, by endpoint

    def set_probe(self, probe: Probe, still_windows: int) -> None:
        """Read endpoints' counters with `probe`, `still_windows` stall windows apart (0: never;
        the windows' rules alone, as without a probe)."""
        self._probe = probe
        self.watch.still_windows = still_windows

    async def close(self) -> None:
        """Cancel and await the reads in flight (the app's shutdown, before the probe's client
        closes); no read starts afterwards."""
        self.watch.still_windows = 0
        for task in await stop_tasks(list(self._probes.values())):
            logger.error("engine probe did not stop within %.0f s: %s", STOP_GRACE_S, where(task))

    def waiting(
        self,
        endpoint_id: str,
        allowance_s: float,
        movable: bool = True,
        first_token_s: float | None = None,
    ) -> Wait:
        """The current task waits on `endpoint_id`, overdue after `allowance_s` (its first
        token's share: `first_token_s`, `StallWatch.begin`); a stall ends it only when
        `movable` (the request has somewhere else to go)."""
        wait = Wait(endpoint_id, asyncio.current_task())
        now = self._clock()
        watch = self.watch
        self._arm_by(watch.begin(endpoint_id, wait, now, allowance_s, movable, first_token_s))
        return wait

    def arrived(self, wait: Wait | None) -> None:
        """The attempt's first progress came: it stops waiting and the endpoint progressed."""
        if wait is not None:
            now = self._clock()
            self.watch.end(wait.endpoint_id, wait, now)
            self.watch.progress(wait.endpoint_id, now)

    def done(self, wait: Wait | None) -> None:
        """The attempt stopped waiting without progress (a failure, the client's limit)."""
        if wait is not None:
            self.watch.end(wait.endpoint_id, wait, self._clock())

    def progress(self, endpoint_id: str) -> None:
        """A later byte of an answer from `endpoint_id` (a stream's chunk)."""
        self.watch.progress(endpoint_id, self._clock())

    def retain(self, endpoint_ids: Iterable[str]) -> None:
        self.watch.retain(endpoint_ids)

    def _arm_by(self, at: float) -> None:
        """Make sure the timer fires no later than `at` (on `clock`)."""
        if at >= self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
        delay_s = max(0.0, at - self._clock())
        self._timer = asyncio.get_running_loop().call_later(delay_s, self._fire)
        self._timer_at = at

    def _fire(self) -> None:
        self._timer, self._timer_at = None, float("inf")
        now = self._clock()
        self._end(waiter for _, waiter in self.watch.stalled(now))
        probe = self._probe
        if probe is not None:
            for endpoint_id, epoch in self.watch.probes_due(now):
                task = asyncio.create_task(self._read(probe, endpoint_id, epoch))
                self._probes[endpoint_id] = task
                task.add_done_callback(self._read_done)
        self._settle(now)

    async def _read(self, probe: Probe, endpoint_id: str, epoch: int) -> None:
        """One read of `endpoint_id`'s counters, handed to the watch when it comes (a read
        that raised or was cancelled says nothing: no series)."""
        reading: Reading = Unread.NO_SERIES
        try:
            reading = await probe(endpoint_id)
        finally:
            self._probes.pop(endpoint_id, None)
            now = self._clock()
            ended = self.watch.read(endpoint_id, epoch, now, reading)
            if ended is not None:
                if self.on_hang is not None:
                    self.on_hang(endpoint_id)
                self._end(ended)
            self._settle(now)

    @staticmethod
    def _read_done(task: asyncio.Task[None]) -> None:
        if not task.cancelled() and (err := task.exception()) is not None:
            logger.error("engine probe failed", exc_info=err)

    @staticmethod
    def _end(waiters: Iterable[Waiter]) -> None:
        """End these attempts as lack of progress (their tasks are cancelled, marked)."""
        for wait in waiters:
            assert isinstance(wait, Wait)
            wait.stalled = True
            if wait.task is not None:
                wait.task.cancel()

    def _settle(self, now: float) -> None:
        """Tell the breakers the stalls found, and arm the timer for the next check."""
        on_stall = self.on_stall
        for endpoint_id, hung in self.watch.take_stalls():
            if on_stall is not None:
                on_stall(endpoint_id, hung)
        soonest = self.watch.next_check(now)
        if soonest is not None:
            self._arm_by(soonest)
