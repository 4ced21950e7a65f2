"""The CPU one request spends on its request deadline: `asyncio.timeout` (a loop timer armed
and cancelled per request) against `data_plane/serving/deadlines.py` (one shared timer), on
uvloop, the data plane's loop.

Like `metric_cost`: a few microseconds that an end-to-end row cannot resolve, measured alone
in process CPU time, the two kinds alternated over several rounds, each one's median kept.
`python -m bench.overhead.timer_cost` prints the note.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

import uvloop

from bench.common.stats import median_low
from data_plane.serving.deadlines import Deadlines

DEADLINE_S = 20.0  # the overhead section's latency budget: a deadline that never fires


@dataclass(frozen=True, slots=True)
class TimerCost:
    asyncio_timeout_us: float  # per request
    shared_us: float  # per request
    requests: int
    rounds: int


async def _step() -> None:
    return None


async def _us_per_request(make: Callable[[], AbstractAsyncContextManager[Any]], n: int) -> float:
    gc.disable()
    try:
        started = time.process_time()
        for _ in range(n):
            async with make():
                await _step()
        bare = time.process_time()
        for _ in range(n):
            await _step()
        ended = time.process_time()
        return ((bare - started) - (ended - bare)) / n * 1e6
    finally:
        gc.enable()


async def _measure(requests: int, rounds: int) -> TimerCost:
    keeper = Deadlines()

    def stdlib() -> AbstractAsyncContextManager[Any]:
        return asyncio.timeout(DEADLINE_S)

    def shared() -> AbstractAsyncContextManager[Any]:
        return keeper.timeout(DEADLINE_S)

    kinds = (stdlib, shared)
    for make in kinds:  # warm
        await _us_per_request(make, 1000)
    timings: dict[str, list[float]] = {"stdlib": [], "shared": []}
    for _ in range(rounds):
        for make in kinds:
            timings[make.__name__].append(await _us_per_request(make, requests))
    return TimerCost(median_low(timings["stdlib"]), median_low(timings["shared"]), requests, rounds)


def measure_timer_cost(requests: int = 50_000, rounds: int = 5) -> TimerCost:
    return uvloop.run(_measure(requests, rounds))


def timer_cost_note(cost: TimerCost) -> str:
    saved = cost.asyncio_timeout_us - cost.shared_us
    return (
        f"request deadline of one request on uvloop (median of {cost.rounds} x "
        f"{cost.requests:,}, process CPU time): asyncio.timeout {cost.asyncio_timeout_us:.2f} µs, "
        f"serving/deadlines.py {cost.shared_us:.2f} µs ({saved:+.2f} µs per request for "
        "deadlines.py)"
    )


if __name__ == "__main__":
    print(timer_cost_note(measure_timer_cost()))
