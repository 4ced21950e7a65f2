"""Stopping a process's background tasks: cancelled until each has ended, for a bounded time.

Both planes run loops that talk to Redis, and on Python 3.11 redis-py can swallow a cancel (its
writes go through `asyncio.wait_for`, which returns the result instead of raising when the
cancel lands as the write completes, CPython gh-86296): a shutdown that cancels once can wait
forever on a loop that goes on. So a stop cancels again until each task has ended, and gives
up after `grace_s`, handing back the tasks left running so the caller can log where each waits
(`await_chain`): a process's SIGTERM is answered within a pod's grace period whatever a loop
does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

STOP_GRACE_S = 10.0  # how long a stop waits after its first cancel
_RECANCEL_S = 0.5  # how often a task still running is cancelled again
_MAX_DEPTH = 64


async def stop_tasks(
    tasks: Sequence[asyncio.Task[Any]], grace_s: float = STOP_GRACE_S
) -> list[asyncio.Task[Any]]:
    """Cancel `tasks` until each has ended or `grace_s` has passed; await the ended ones
    (their errors were the tasks' own to report). Returns the tasks still running."""
    loop = asyncio.get_running_loop()
    give_up_at = loop.time() + grace_s
    while pending := [t for t in tasks if not t.done()]:
        left_s = give_up_at - loop.time()
        if left_s <= 0:
            break
        for task in pending:
            task.cancel()
        await asyncio.wait(pending, timeout=min(_RECANCEL_S, left_s))
    await asyncio.gather(*(t for t in tasks if t.done()), return_exceptions=True)
    return [t for t in tasks if not t.done()]


def await_chain(task: asyncio.Task[Any]) -> list[str]:
    """'file:line in function' for each coroutine the task waits through, outermost first,
    then what the innermost one awaits (`Task.print_stack` stops at the first frame)."""
    return coroutine_chain(task.get_coro())


def coroutine_chain(coro: object) -> list[str]:
    """`await_chain` from a coroutine, async generator or generator."""
    chain: list[str] = []
    for _ in range(_MAX_DEPTH):
        if coro is None:
            break
        frame = (
            getattr(coro, "cr_frame", None)
            or getattr(coro, "ag_frame", None)
            or getattr(coro, "gi_frame", None)
        )
        if frame is not None:
            code = frame.f_code
            chain.append(f"{code.co_filename}:{frame.f_lineno} in {code.co_name}")
        inner = (
            getattr(coro, "cr_await", None)
            or getattr(coro, "ag_await", None)
            or getattr(coro, "gi_yieldfrom", None)
        )
        if inner is None:
            chain.append(f"awaiting {coro!r}"[:300])
        coro = inner
    return chain


def where(task: asyncio.Task[Any]) -> str:
    """One line for a log: the task's name and where it waits, innermost first."""
    return f"{task.get_name()} at " + " <- ".join(reversed(await_chain(task)))
