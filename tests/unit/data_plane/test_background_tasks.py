"""`data_plane.background_tasks`: the loops both doors run in the background (the HTTP data
plane's cleanup contexts, gateway mode's process) are named, an early death is logged, and
shutdown ends them even when one swallows a cancel."""

from __future__ import annotations

import asyncio
import logging

import pytest

from data_plane.background_tasks import BackgroundTasks
from tests.support.waiting import eventually


async def test_a_loop_that_dies_is_logged_by_its_name(caplog: pytest.LogCaptureFixture) -> None:
    async def dies() -> None:
        raise RuntimeError("boom")

    tasks = BackgroundTasks()
    with caplog.at_level(logging.ERROR, logger="data_plane.background_tasks"):
        tasks.start("table_watch", dies())
        await asyncio.gather(tasks.tasks["table_watch"], return_exceptions=True)
        await eventually(lambda: bool(caplog.records), what="the death logged")
    record = caplog.records[0]
    assert record.getMessage() == "background task gearbox-table_watch died"
    assert record.exc_info is not None
    assert str(record.exc_info[1]) == "boom"
    await tasks.stop("table_watch")
    assert tasks.tasks == {}


async def test_stop_ends_a_loop_that_swallows_its_first_cancel() -> None:
    """redis-py on Python 3.11 can swallow a cancel (CPython gh-86296): shutdown cancels
    again instead of hanging."""
    cancels = 0
    started, forever = asyncio.Event(), asyncio.Event()  # `forever` is never set

    async def stubborn() -> None:
        nonlocal cancels
        started.set()
        while True:
            try:
                await forever.wait()
            except asyncio.CancelledError:
                cancels += 1
                if cancels > 1:
                    raise

    tasks = BackgroundTasks()
    tasks.start("scrape", stubborn())
    task = tasks.tasks["scrape"]
    await started.wait()
    await tasks.stop("scrape", "not_started")
    assert task.cancelled()
    assert cancels == 2


async def test_a_loop_cancelled_at_shutdown_is_not_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    started = asyncio.Event()

    async def loop() -> None:
        started.set()
        await asyncio.Event().wait()

    tasks = BackgroundTasks()
    with caplog.at_level(logging.ERROR, logger="data_plane.background_tasks"):
        tasks.start("discovery", loop())
        await started.wait()
        await tasks.stop("discovery")
    assert caplog.records == []


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
        with caplog.at_level(logging.ERROR, logger="data_plane.background_tasks"):
            await tasks.stop("stubborn", "polite")  # returns: the test would time out otherwise
        assert polite.cancelled()
        assert not stubborn.done()
        [record] = [r for r in caplog.records if "did not stop" in r.getMessage()]
        assert "gearbox-stubborn" in record.getMessage()
        assert "_stubborn_wait" in record.getMessage(), "the await that holds it is named"
    finally:
        release.set()  # a task left running would hang the loop's own teardown
        await stubborn
