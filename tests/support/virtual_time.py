"""An asyncio event loop on virtual time, for tests of timers and deadlines.

When nothing is ready to run, the loop's clock jumps to its next timer instead of waiting for
it: a test's sleeps and deadlines take no wall time, and a loaded machine (xdist workers,
other suites) cannot stretch one timer past another. Only for code that waits on timers alone:
a socket's bytes still arrive in wall time, and a loop with nothing scheduled fails at once
instead of waiting forever.
"""

from __future__ import annotations

import asyncio
import functools
import selectors
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec

P = ParamSpec("P")


class _JumpingSelector(selectors.DefaultSelector):
    """Polls without blocking; a wait the loop asked for moves its clock forward instead."""

    def __init__(self, advance: Callable[[float], None]) -> None:
        super().__init__()
        self._advance = advance

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:
            raise RuntimeError("virtual time: nothing is scheduled, the loop would wait forever")
        self._advance(timeout)
        return ready


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """`time()` starts at 0 and moves only when the loop would otherwise wait."""

    def __init__(self) -> None:
        self._now = 0.0
        super().__init__(_JumpingSelector(self._jump))

    def _jump(self, seconds: float) -> None:
        self._now += seconds

    def time(self) -> float:
        return self._now


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
            loop.close()

    return run
