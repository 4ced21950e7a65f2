"""Where a suspended task waits: the chain of awaits from its coroutine down to the future.

`Task.print_stack` stops at the task's first frame, which for a background loop says only
"in run"; a shutdown that cannot stop a task (data_plane.app's `BackgroundTasks.stop`) logs
this chain instead, so the await that ignores cancellation is named.
"""

from __future__ import annotations

import asyncio
from typing import Any

_MAX_DEPTH = 64


def await_chain(task: asyncio.Task[Any]) -> list[str]:
    """'file:line in function' for each coroutine the task waits through, outermost first,
    then what the innermost one awaits."""
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
