"""A process's background loops, for both doors: each started by name (an early death is a
bug, logged when it happens), cancelled and awaited on shutdown. The HTTP data plane's
cleanup contexts (`app.py`) and gateway mode's process (`gateway_app.py`) keep theirs here."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

logger = logging.getLogger(__name__)


class BackgroundTasks:
    """Named background tasks; cancelled and awaited on shutdown."""

    def __init__(self) -> None:
        self.tasks: dict[str, asyncio.Task[None]] = {}

    def start(self, name: str, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro, name=f"gearbox-{name}")
        task.add_done_callback(_report_death)
        self.tasks[name] = task

    async def stop(self, *names: str) -> None:
        """Cancel and await the named tasks (a failure was logged when it happened).

        Cancels again until each task has ended: on Python 3.11 redis-py can swallow a cancel
        (its writes go through `asyncio.wait_for`, CPython gh-86296), and one lost cancel
        must not hang shutdown forever.
        """
        tasks = [self.tasks.pop(n) for n in names if n in self.tasks]
        while pending := [t for t in tasks if not t.done()]:
            for task in pending:
                task.cancel()
            await asyncio.wait(pending, timeout=0.5)
        await asyncio.gather(*tasks, return_exceptions=True)


def _report_death(task: asyncio.Task[None]) -> None:
    """A background loop must run until shutdown; one that ends early is a bug, said loudly."""
    if task.cancelled():
        return
    err = task.exception()
    if err is not None:
        logger.error("background task %s died", task.get_name(), exc_info=err)
