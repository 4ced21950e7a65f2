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
- no byte sent on a registered socket may still be on its way: on loopback the kernel may
  still be delivering a segment (under load it defers that to `ksoftirqd`), and its arrival
  would wake the loop before the timer. A byte is on its way while its peer has not
  acknowledged it (`SIOCOUTQ`), unless that peer is a socket of this loop that has received
  every byte sent (`TCP_INFO`; its ACK may be delayed while it works on them);
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
import os
import selectors
import socket
import struct
import termios
import time
from collections.abc import Callable, Coroutine, Mapping
from concurrent.futures import Executor
from typing import Any, ParamSpec, TypeVar, TypeVarTuple

P = ParamSpec("P")
T = TypeVar("T")
Ts = TypeVarTuple("Ts")

STEP_S = 0.001  # one wall-time wait while something is in flight
STUCK_S = 0.5  # wall seconds in flight after which the clock moves anyway
_INT = struct.Struct("i")
_U64 = struct.Struct("Q")
# struct tcp_info (linux/tcp.h, Linux 4.1 and later): tcpi_bytes_acked, tcpi_bytes_received
_BYTES_ACKED, _BYTES_RECEIVED, _TCP_INFO_SIZE = 120, 128, 136
# tcpi_state (its first byte) once the peer's FIN arrived: TIME_WAIT, CLOSE, CLOSE_WAIT,
# LAST_ACK, CLOSING
_FIN_RECEIVED = frozenset({6, 7, 8, 9, 11})


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

    def in_flight(self) -> bool:
        """Whether bytes sent on a registered socket may not have reached its peer yet: its
        peer has not acknowledged them (`SIOCOUTQ`) and is not a socket of this loop that
        received them all (`TCP_INFO`; one that did may hold back its acknowledgement for up
        to 40 ms, a delayed ACK, while it works on what it read)."""
        unacked: dict[int, int] = {}
        for key in list(self.get_map().values()):
            try:
                (count,) = _INT.unpack(fcntl.ioctl(key.fd, termios.TIOCOUTQ, bytes(_INT.size)))
            except OSError:  # a pipe, a listening socket
                continue
            if count > 0:
                unacked[key.fd] = count
        if not unacked:
            return False
        ends = _tcp_ends(self.get_map())
        by_name = {(local, peer): fd for fd, (local, peer, _) in ends.items()}
        for fd, count in unacked.items():
            if fd not in ends:
                return True
            local, peer, info = ends[fd]
            other = by_name.get((peer, local))
            if other is None:  # another process's socket: only its ACK tells
                return True
            (acked,) = _U64.unpack_from(info, _BYTES_ACKED)
            (received,) = _U64.unpack_from(ends[other][2], _BYTES_RECEIVED)
            fin = ends[other][2][0] in _FIN_RECEIVED  # a FIN counts one in SIOCOUTQ
            if acked + count > received + fin:
                return True
        return False


def _tcp_ends(
    registered: Mapping[Any, selectors.SelectorKey],
) -> dict[int, tuple[Any, Any, bytes]]:
    """Each registered TCP socket's (local address, peer address, `TCP_INFO`)."""
    ends: dict[int, tuple[Any, Any, bytes]] = {}
    for key in list(registered.values()):
        try:
            sock = socket.socket(fileno=os.dup(key.fd))
        except OSError:
            continue
        try:
            if sock.type == socket.SOCK_STREAM and sock.family in (socket.AF_INET, socket.AF_INET6):
                info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_SIZE)
                ends[key.fd] = (sock.getsockname(), sock.getpeername(), info)
        except OSError:  # not a socket, not connected
            pass
        finally:
            sock.close()
    return ends


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
        return self._in_executor > 0 or self._jumping.in_flight()

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
