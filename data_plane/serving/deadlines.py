"""Request deadlines on one shared timer: `asyncio.timeout`'s contract, no timer per request.

`asyncio.timeout` arms a loop timer when a request starts and cancels it when the request
ends: about 3.5 us per request under uvloop (`python -m bench.overhead.timer_cost`), for a deadline
that almost never fires. Here every request's deadline registers with the app's `Deadlines`,
which keeps ONE timer, armed at the soonest deadline and moved only when a sooner one
arrives; when it fires it cancels the tasks whose deadline has passed and re-arms for the
soonest one left (a scan of the requests in flight, once per deadline length at most).

Same contract as `asyncio.Timeout` (Python 3.11): the task whose deadline passes is
cancelled, and leaving the `async with` turns that CancelledError into TimeoutError unless
another cancellation is pending; `expired()`, `when()` and `reschedule()` as there (times on
the loop's clock).
"""

from __future__ import annotations

import asyncio
import math
from types import TracebackType

_ENTERED, _EXPIRING, _EXPIRED, _EXITED = range(4)


class Deadline:
    """One request's deadline: an async context like `asyncio.Timeout`."""

    __slots__ = ("_keeper", "_state", "_task", "_when")

    def __init__(self, keeper: Deadlines, when: float | None) -> None:
        self._keeper = keeper
        self._when = when
        self._task: asyncio.Task[object] | None = None
        self._state = -1  # not entered yet

    def when(self) -> float | None:
        return self._when

    def expired(self) -> bool:
        """Did the deadline pass while the block ran?"""
        return self._state in (_EXPIRING, _EXPIRED)

    def reschedule(self, when: float | None) -> None:
        if self._state != _ENTERED:
            raise RuntimeError("only a deadline in force can be moved")
        self._when = when
        if when is not None:
            self._keeper.arm_by(when)

    async def __aenter__(self) -> Deadline:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a deadline needs a task")
        self._task = task
        self._state = _ENTERED
        self._keeper.enter(self)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._keeper.leave(self)
        if self._state == _EXPIRING:
            self._state = _EXPIRED
            assert self._task is not None
            if self._task.uncancel() == 0 and exc_type is asyncio.CancelledError:
                raise TimeoutError  # no other cancellation pending: this one was ours
        else:
            self._state = _EXITED

    def expire(self) -> None:
        """The keeper's timer found this deadline passed."""
        assert self._task is not None
        self._state = _EXPIRING
        self._task.cancel()


class Deadlines:
    """The deadlines of one app's requests in flight, and the one timer that keeps them."""

    __slots__ = ("_active", "_timer", "_timer_at")

    def __init__(self) -> None:
        self._active: set[Deadline] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf

    def timeout(self, delay_s: float | None) -> Deadline:
        """A deadline `delay_s` from now (None: none), like `asyncio.timeout(delay_s)`."""
        if delay_s is None:
            return Deadline(self, None)
        return Deadline(self, asyncio.get_running_loop().time() + delay_s)

    def enter(self, deadline: Deadline) -> None:
        self._active.add(deadline)
        when = deadline.when()
        if when is not None and when < self._timer_at:
            self.arm_by(when)

    def leave(self, deadline: Deadline) -> None:
        """The block ended: nothing to disarm (a timer that fires for nobody re-arms for
        the soonest deadline left, or not at all)."""
        self._active.discard(deadline)

    def arm_by(self, when: float) -> None:
        """Make sure the timer fires no later than `when`."""
        if when >= self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_at(when, self._fire)
        self._timer_at = when

    def _fire(self) -> None:
        self._timer, self._timer_at = None, math.inf
        now = asyncio.get_running_loop().time()
        soonest = math.inf
        for deadline in list(self._active):
            when = deadline.when()
            if when is None:
                continue
            if when <= now:
                self._active.discard(deadline)
                deadline.expire()
            elif when < soonest:
                soonest = when
        if soonest < math.inf:
            self.arm_by(soonest)

    def in_force(self) -> int:
        """Deadlines of requests in flight (for tests and debugging)."""
        return len(self._active)
