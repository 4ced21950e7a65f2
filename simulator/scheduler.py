"""Admission for one simulated engine: at most `max_running` requests decode, the rest wait FIFO.

Like vLLM's scheduler, a full waiting queue rejects new work. A ticket that is cancelled while
waiting leaves the queue; one cancelled while running gives its slot to the next in line.
"""

from __future__ import annotations

import asyncio
from collections import deque


class QueueFullError(Exception):
    """The waiting queue holds `max_queue` requests already."""


class Ticket:
    """One request's place: admitted now, or waiting for a slot. `close()` is idempotent."""

    def __init__(self, scheduler: Scheduler, waiter: asyncio.Future[None] | None) -> None:
        self._scheduler = scheduler
        self._waiter = waiter
        self._closed = False

    @property
    def admitted(self) -> bool:
        waiter = self._waiter
        return waiter is None or (waiter.done() and not waiter.cancelled())

    async def wait(self) -> None:
        """Return once this request holds a slot (FIFO); cancellable."""
        if self._waiter is not None:
            await self._waiter

    def close(self) -> None:
        """Give back the slot, or leave the queue when still waiting."""
        if self._closed:
            return
        self._closed = True
        if self.admitted:
            self._scheduler.release()
        elif self._waiter is not None:
            self._waiter.cancel()
            self._scheduler.forget(self._waiter)


class Scheduler:
    """Counts running slots and keeps the FIFO of waiting requests."""

    def __init__(self, max_running: int, max_queue: int) -> None:
        self.max_running = max_running
        self.max_queue = max_queue
        self.running = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def waiting(self) -> int:
        return sum(1 for w in self._waiters if not w.done())

    def enqueue(self) -> Ticket:
        """A ticket that is admitted at once if a slot is free; QueueFullError when no room."""
        if self.running < self.max_running and self.waiting == 0:
            self.running += 1
            return Ticket(self, None)
        if self.waiting >= self.max_queue:
            raise QueueFullError
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        return Ticket(self, waiter)

    def release(self) -> None:
        """A running request ended: hand its slot to the oldest waiter, or free it."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot moves over; `running` is unchanged
                return
        self.running -= 1

    def forget(self, waiter: asyncio.Future[None]) -> None:
        """Drop a cancelled waiter from the queue."""
        if waiter in self._waiters:
            self._waiters.remove(waiter)
