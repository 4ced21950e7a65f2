"""A process's background loops, for both doors: each started by name (an early death is a
bug, logged when it happens), cancelled and awaited on shutdown. The HTTP data plane's
cleanup contexts (`app.py`) and gateway mode's process (`gateway_app.py`) keep theirs here."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

from contracts.task_stop import STOP_GRACE_S, stop_tasks, where

logger = logging.getLogger(__name__)


class BackgroundTasks:
    """Named background tasks; cancelled and awaited on shutdown."""

    def __init__(self, grace_s: float = STOP_GRACE_S) -> None:
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self._grace_s = grace_s

    def start(self, name: str, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro, name=f"gearbox-{name}")
        task.add_done_callback(_report_death)
        self.tasks[name] = task

    async def stop(self, *names: str) -> None:
        """Cancel and await the named tasks (a failure was logged when it happened), again
        until each has ended, for at most `grace_s` (`contracts.task_stop`: on Python 3.11
        redis-py can swallow a cancel, CPython gh-86296); a task still running then is left
        behind with an error naming where it waits, and shutdown goes on."""
        tasks = [self.tasks.pop(n) for n in names if n in self.tasks]
        for task in await stop_tasks(tasks, self._grace_s):
            logger.error(
                "background task did not stop within %.0f s of shutdown; left running: %s",
                self._grace_s,
                where(task),
            )


def _report_death(task: asyncio.Task[None]) -> None:
    """A background loop must run until shutdown; one that ends early is a bug, said loudly."""
    if task.cancelled():
        return
    err = task.exception()
    if err is not None:
        logger.error("background task %s died", task.get_name(), exc_info=err)
