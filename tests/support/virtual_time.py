"""An asyncio event loop on virtual time, for tests of timers, deadlines and the latencies the
code under test measures on its own clock.

When nothing can happen before the loop's next timer, its clock jumps to that timer instead of
waiting for it: a test's sleeps and deadlines take no wall time, and a loaded machine (xdist
workers, other suites) cannot stretch one timer past another, nor a measured latency past what
the timers made it. Everything the test runs shares this one loop (simulated engines, the data
plane, the client), over real loopback sockets, and reads the loop's clock (`loop.time`, which
asyncio, aiohttp and the simulator read; `AppDeps(clock=loop.time)` for the data plane).

"Nothing can happen" means, checked in this order each time the loop would wait:
- no callback is ready and no registered file is ready (a real `select` that does not wait);
- no byte sent on a registered socket is still unacknowledged by its peer (`SIOCOUTQ`): on
  loopback the kernel may still be delivering a segment (under load it defers that to
  `ksoftirqd`), and its arrival would wake the loop before the timer;
- no job this loop gave to an executor thread is still running.
Otherwise the loop waits in wall time, `STEP_S` at a time, and its clock does not move; after
`STUCK_S` of that in a row the clock moves anyway (a peer that does not read keeps its bytes
unacknowledged for ever). With no timer at all the loop waits in wall time while something is
in flight; with nothing in flight either it fails at once instead of waiting forever.
"""

from __future__ import annotations

import asyncio
import fcntl
import functools
import selectors
import struct
import termios
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import Executor
from typing import Any, ParamSpec, TypeVar, TypeVarTuple

P = ParamSpec("P")
T = TypeVar("T")
Ts = TypeVarTuple("Ts")

STEP_S = 0.001  # one wall-time wait while something is in flight
STUCK_S = 0.5  # wall seconds in flight after which the clock moves anyway
_UNACKED = struct.Struct("i")


class _JumpingSelector(selectors.DefaultSelector):
    """Polls without blocking; a wait the loop asked for moves its clock forward instead, once
    nothing is in flight (`busy`)."""

    def __init__(self, advance: Callable[[float], None], busy: Callable[[], bool]) -> None:
        super().__init__()
        self._advance = advance
        self._busy = busy
        self.jumps = 0  # the clock moved to a timer
        self.waits = 0  # wall-time waits for something in flight

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(0)
        if ready or timeout == 0:
            return ready
        since = time.monotonic()
        while self._busy() and (timeout is None or time.monotonic() - since < STUCK_S):
            self.waits += 1
            ready = super().select(STEP_S)
            if ready:
                return ready
        if timeout is None:
            raise RuntimeError("virtual time: nothing is scheduled, the loop would wait forever")
        self.jumps += 1
        self._advance(timeout)
        return ready

    def unacknowledged(self) -> bool:
        """Whether a registered socket has sent bytes its peer has not acknowledged yet."""
        for key in list(self.get_map().values()):
            try:
                (unacked,) = _UNACKED.unpack(fcntl.ioctl(key.fd, termios.TIOCOUTQ, bytes(4)))
            except OSError:  # a pipe, a listening socket
                continue
            if unacked > 0:
                return True
        return False


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """`time()` starts at 0 and moves only when the loop would otherwise wait for a timer."""

    def __init__(self) -> None:
        self._now = 0.0
        self._in_executor = 0
        self._jumping = _JumpingSelector(self._jump, self._busy)
        super().__init__(self._jumping)

    def _jump(self, seconds: float) -> None:
        self._now += seconds

    def _busy(self) -> bool:
        return self._in_executor > 0 or self._jumping.unacknowledged()

    def time(self) -> float:
        return self._now

    @property
    def jumps(self) -> int:
        return self._jumping.jumps

    @property
    def waits(self) -> int:
        return self._jumping.waits

    def run_in_executor(
        self, executor: Executor | None, func: Callable[[*Ts], T], *args: *Ts
    ) -> asyncio.Future[T]:
        future = super().run_in_executor(executor, func, *args)
        self._in_executor += 1
        future.add_done_callback(self._executor_done)
        return future

    def _executor_done(self, _: asyncio.Future[Any]) -> None:
        self._in_executor -= 1


def on_virtual_time(
    test: Callable[P, Coroutine[Any, Any, None]],
) -> Callable[P, None]:
    """Run an async test on a fresh `VirtualTimeLoop` (a plain test to pytest-asyncio)."""

    @functools.wraps(test)
    def run(*args: P.args, **kwargs: P.kwargs) -> None:
        loop = VirtualTimeLoop()
        try:
            loop.run_until_complete(test(*args, **kwargs))
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    return run
