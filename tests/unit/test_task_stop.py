"""Stopping background tasks (contracts.task_stop): cancelled until each ends, never waited on
forever, and a task left behind is named with the await that holds it."""

from __future__ import annotations

import asyncio

from contracts.task_stop import await_chain, coroutine_chain, stop_tasks, where


async def _forever() -> None:
    await asyncio.Event().wait()


async def _swallows_one(done: list[str]) -> None:
    """Swallows the first cancel, as redis-py can on Python 3.11, then keeps looping."""
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        asyncio.current_task().uncancel()  # type: ignore[union-attr]
    done.append("swallowed")
    await asyncio.Event().wait()


async def _outer(release: asyncio.Event) -> None:
    await _inner(release)


async def _inner(release: asyncio.Event) -> None:
    while not release.is_set():
        try:
            await release.wait()
        except asyncio.CancelledError:
            asyncio.current_task().uncancel()  # type: ignore[union-attr]


async def test_a_swallowed_cancel_is_followed_by_another() -> None:
    seen: list[str] = []
    tasks = [asyncio.create_task(_swallows_one(seen)), asyncio.create_task(_forever())]
    await asyncio.sleep(0)
    assert await stop_tasks(tasks, grace_s=5.0) == []
    assert seen == ["swallowed"], "the first cancel was swallowed, a second one ended it"
    assert all(t.cancelled() for t in tasks)


async def test_a_task_that_never_stops_is_handed_back_after_the_grace() -> None:
    release = asyncio.Event()
    stubborn = asyncio.create_task(_outer(release), name="stubborn")
    polite = asyncio.create_task(_forever())
    await asyncio.sleep(0)
    try:
        assert await stop_tasks([stubborn, polite], grace_s=0.2) == [stubborn]
        assert polite.cancelled()
        line = where(stubborn)
        assert line.startswith("stubborn at ")
        assert "in _inner <- " in line, line
    finally:
        release.set()  # a task left running would hang the loop's own teardown
        await stubborn


async def test_await_chain_names_each_coroutine_down_to_the_future() -> None:
    release = asyncio.Event()
    task = asyncio.create_task(_outer(release))
    await asyncio.sleep(0)
    chain = await_chain(task)
    assert [line.rsplit(" in ", 1)[-1] for line in chain[:2]] == ["_outer", "_inner"]
    assert chain[-1].startswith("awaiting ")
    release.set()
    await task
    assert coroutine_chain(task.get_coro())[-1].startswith("awaiting "), "a finished one"
