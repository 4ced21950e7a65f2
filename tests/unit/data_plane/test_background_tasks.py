"""Shutdown stops the data plane's background tasks, and never waits forever on one that
ignores cancellation (data_plane.app.BackgroundTasks; a CI run's fixture teardown once waited
300 s on the data plane's shutdown)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from data_plane.app import BackgroundTasks


async def _forever() -> None:
    await asyncio.Event().wait()


async def _ignores_cancel(release: asyncio.Event) -> None:
    """Swallows every cancel until the test releases it."""
    while not release.is_set():
        try:
            await _stubborn_wait(release)
        except asyncio.CancelledError:
            asyncio.current_task().uncancel()  # type: ignore[union-attr]


async def _stubborn_wait(release: asyncio.Event) -> None:
    await release.wait()


async def test_stop_cancels_and_awaits_every_named_task() -> None:
    tasks = BackgroundTasks()
    tasks.start("a", _forever())
    tasks.start("b", _forever())
    started = dict(tasks.tasks)
    await tasks.stop("a", "b", "never-started")
    assert all(t.cancelled() for t in started.values())
    assert tasks.tasks == {}


async def test_a_task_that_ignores_cancel_is_left_behind_named_where_it_waits(
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = asyncio.Event()
    tasks = BackgroundTasks(grace_s=0.2)
    tasks.start("stubborn", _ignores_cancel(release))
    tasks.start("polite", _forever())
    stubborn, polite = tasks.tasks["stubborn"], tasks.tasks["polite"]
    await asyncio.sleep(0)
    try:
        with caplog.at_level(logging.ERROR, logger="data_plane.app"):
            await tasks.stop("stubborn", "polite")  # returns: the test would time out otherwise
        assert polite.cancelled()
        assert not stubborn.done()
        [record] = [r for r in caplog.records if "did not stop" in r.getMessage()]
        assert "gearbox-stubborn" in record.getMessage()
        assert "_stubborn_wait" in record.getMessage(), "the await that holds it is named"
    finally:
        release.set()  # a task left running would hang the loop's own teardown
        await stubborn
