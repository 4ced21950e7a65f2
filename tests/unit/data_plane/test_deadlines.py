"""serving/deadlines.py keeps `asyncio.timeout`'s contract with one timer for all requests:
each case runs against both and must come out the same. The cases run on virtual time
(tests/support/virtual_time.py): their timers fire in order whatever the machine's load."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import TracebackType
from typing import Protocol

import pytest
import uvloop

from data_plane.serving.deadlines import Deadlines
from tests.support.virtual_time import on_virtual_time


class Limit(Protocol):
    """What asyncio.Timeout and deadlines.Deadline share."""

    def when(self) -> float | None: ...

    def expired(self) -> bool: ...

    def reschedule(self, when: float | None) -> None: ...

    async def __aenter__(self) -> Limit: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None: ...


Make = Callable[[float | None], Limit]


def both() -> list[tuple[str, Callable[[], Make]]]:
    def stdlib() -> Make:
        return asyncio.timeout

    def shared() -> Make:
        return Deadlines().timeout

    return [("asyncio.timeout", stdlib), ("deadlines", shared)]


KINDS = pytest.mark.parametrize(("name", "kind"), both(), ids=[n for n, _ in both()])


@KINDS
@on_virtual_time
async def test_a_passed_deadline_is_a_timeout_error(name: str, kind: Callable[[], Make]) -> None:
    timeout = kind()
    expiring = timeout(0.05)

    async def overruns() -> None:
        async with expiring:
            await asyncio.sleep(5)

    with pytest.raises(TimeoutError):
        await overruns()
    assert expiring.expired()
    async with timeout(1.0) as kept:
        await asyncio.sleep(0.01)
    assert not kept.expired()
    async with timeout(None) as never:
        await asyncio.sleep(0.01)
    assert (never.expired(), never.when()) == (False, None)


@KINDS
@on_virtual_time
async def test_an_outside_cancellation_stays_a_cancellation(
    name: str, kind: Callable[[], Make]
) -> None:
    timeout = kind()

    async def guarded() -> None:
        async with timeout(5.0):
            await asyncio.sleep(5)

    task = asyncio.create_task(guarded())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@KINDS
@on_virtual_time
async def test_moving_a_deadline_later_and_sooner(name: str, kind: Callable[[], Make]) -> None:
    timeout = kind()
    loop = asyncio.get_running_loop()
    async with timeout(0.05) as t:
        when = t.when()
        assert when is not None
        t.reschedule(when + 0.2)  # later: survives the first moment
        await asyncio.sleep(0.1)
    assert not t.expired()
    started = loop.time()

    async def shortened() -> None:
        async with timeout(10.0) as t:
            t.reschedule(loop.time() + 0.05)  # sooner: fires then, not in 10 s
            await asyncio.sleep(5)

    with pytest.raises(TimeoutError):
        await shortened()
    assert loop.time() - started < 2.0


@on_virtual_time
async def test_many_requests_share_one_timer_and_each_ends_at_its_own_deadline() -> None:
    keeper = Deadlines()
    loop = asyncio.get_running_loop()
    ended: dict[int, float] = {}

    async def request(i: int, deadline_s: float, work_s: float) -> str:
        started = loop.time()
        try:
            async with keeper.timeout(deadline_s):
                await asyncio.sleep(work_s)
            return "done"
        except TimeoutError:
            return "timed out"
        finally:
            ended[i] = loop.time() - started

    # 40 requests: even ones finish early, odd ones outlive deadlines of 50..240 ms
    jobs = [request(i, 0.05 + 0.01 * (i // 2), 0.01 if i % 2 == 0 else 5.0) for i in range(40)]
    results = await asyncio.gather(*jobs)
    assert results == ["done" if i % 2 == 0 else "timed out" for i in range(40)]
    for i in range(1, 40, 2):
        deadline_s = 0.05 + 0.01 * (i // 2)
        assert ended[i] == pytest.approx(deadline_s, abs=1e-6)  # virtual time: exactly then
    assert keeper.in_force() == 0


def test_the_keeper_works_on_uvloop() -> None:
    async def main() -> tuple[bool, bool]:
        keeper = Deadlines()
        timed_out = False
        try:
            async with keeper.timeout(0.05):
                await asyncio.sleep(5)
        except TimeoutError:
            timed_out = True
        async with keeper.timeout(5.0) as kept:
            await asyncio.sleep(0.01)
        return timed_out, kept.expired()

    assert uvloop.run(main()) == (True, False)
