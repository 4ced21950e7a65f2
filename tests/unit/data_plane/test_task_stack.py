"""Where a suspended task waits (data_plane.telemetry.task_stack): what the data plane's
shutdown names for a task that does not stop."""

from __future__ import annotations

import asyncio

from data_plane.telemetry.task_stack import await_chain, coroutine_chain


async def _outer(release: asyncio.Event) -> None:
    await _inner(release)


async def _inner(release: asyncio.Event) -> None:
    await release.wait()


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
