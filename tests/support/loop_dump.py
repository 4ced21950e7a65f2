"""When a test nears pytest-timeout's limit, print what its event loop is waiting on.

pytest-timeout's own dump shows threads, and for an async test or fixture that is only the
loop's `select`: the task that never finishes is invisible. This watchdog runs beside each
test phase (setup, call, teardown) and, shortly before the limit, asks every running loop
for its tasks and prints each one's stack to stderr, which pytest reports with the failure.
"""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
import types
from collections.abc import Iterator
from contextlib import contextmanager

from contracts.task_stop import await_chain, coroutine_chain

LEAD_S = 20.0  # printed this long before the limit, so the dump lands before the kill


def _dump(loop: asyncio.AbstractEventLoop) -> None:
    tasks = asyncio.all_tasks(loop)
    print(f"\n==== {len(tasks)} tasks pending on a loop near the timeout ====", file=sys.stderr)
    for task in tasks:
        print(f"-- {task!r}", file=sys.stderr)
        for where in await_chain(task):
            print(f"     {where}", file=sys.stderr)
    # A task awaiting an async generator (a fixture's teardown) shows only `asend`: the
    # generators themselves, suspended inside an await, are found among all objects.
    for agen in gc.get_objects():
        if isinstance(agen, types.AsyncGeneratorType) and agen.ag_await is not None:
            print(f"-- async generator {agen.ag_code.co_qualname}", file=sys.stderr)
            for where in coroutine_chain(agen):
                print(f"     {where}", file=sys.stderr)


def _running_loops() -> list[asyncio.AbstractEventLoop]:
    return [
        obj
        for obj in gc.get_objects()
        if isinstance(obj, asyncio.AbstractEventLoop) and obj.is_running()
    ]


def _fire() -> None:
    for loop in _running_loops():
        loop.call_soon_threadsafe(_dump, loop)


@contextmanager
def watchdog(timeout_s: float) -> Iterator[None]:
    """Dump every running loop's tasks LEAD_S before `timeout_s` passes."""
    if timeout_s <= LEAD_S:
        yield
        return
    timer = threading.Timer(timeout_s - LEAD_S, _fire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
