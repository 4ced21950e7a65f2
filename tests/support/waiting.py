"""Bounded waiting for tests: poll a condition instead of sleeping a fixed time."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


async def eventually(
    condition: Callable[[], bool | Awaitable[bool]],
    timeout_s: float = 5.0,
    interval_s: float = 0.02,
    what: str = "condition",
) -> None:
    """Return once `condition()` is true; fail the test after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = condition()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not hold within {timeout_s}s")
        await asyncio.sleep(interval_s)
