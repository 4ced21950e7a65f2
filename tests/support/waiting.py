"""Bounded waiting for tests: poll a condition instead of sleeping a fixed time."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import aiohttp


async def eventually(
    condition: Callable[[], bool | Awaitable[bool]],
    timeout_s: float = 5.0,
    interval_s: float = 0.02,
    what: str = "condition",
) -> None:
    """Return once `condition()` is true; fail the test after `timeout_s` on the loop's clock
    (`time.monotonic` on asyncio's own loop; on virtual time, tests/support/virtual_time.py, the
    time the code under test sees, however long the CPU took to get there)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        result = condition()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if loop.time() > deadline:
            raise AssertionError(f"{what} did not hold within {timeout_s}s")
        await asyncio.sleep(interval_s)


async def within_evidence(
    condition: Callable[[], bool | Awaitable[bool]],
    evidence: Callable[[], int],
    most: int,
    what: str,
    timeout_s: float = 180.0,
) -> None:
    """Return once `condition()` is true; fail the test when `evidence()` (the answers or
    probes the condition waits on) passes `most` first. Evidence that comes from simulated
    engines comes at a wall-clock pace, slower on a loaded machine but no different, so the
    bound is on the evidence; `timeout_s` is only a safety net, under pytest's 300 s."""

    async def held() -> bool:
        result = condition()
        if not isinstance(result, bool):
            result = await result
        if result:
            return True
        seen = evidence()
        assert seen <= most, f"{what} did not hold within {most} (seen {seen})"
        return False

    await eventually(held, timeout_s=timeout_s, what=what)


async def until_ready(
    session: aiohttp.ClientSession,
    base_url: str,
    table_version: int | None = None,
    what: str = "server ready",
) -> None:
    """Wait until `base_url/readyz` answers 200, with `table_version` when given; a refused
    connection (the process still starting) counts as not ready. 120 s is the safety net for
    a child process's start (imports, Redis, the table) on a loaded machine: 30 s ran out
    there for the data plane's and gateway mode's `serve`."""

    async def ready() -> bool:
        try:
            async with session.get(f"{base_url}/readyz") as resp:
                if resp.status != 200:
                    return False
                return (
                    table_version is None or (await resp.json())["table_version"] == table_version
                )
        except aiohttp.ClientConnectionError:
            return False

    await eventually(ready, timeout_s=120, interval_s=0.1, what=what)
