"""bench/common/dp_slices.py and bench/overhead/loop_slices.py: the recorder keeps the long
loop slices with their task and the collections; the summary groups them after the freeze."""

from __future__ import annotations

import asyncio
import gc
import time

from bench.common.dp_slices import LoopRecorder
from bench.overhead.loop_slices import summary


def _busy(ms: float) -> None:
    until = time.thread_time() + ms / 1000
    while time.thread_time() < until:
        pass


async def long_step() -> None:
    _busy(3.0)


async def short_step() -> None:
    return None


def test_the_recorder_keeps_a_long_slice_with_its_task() -> None:
    recorder = LoopRecorder(slice_ms=1.0)
    timed = recorder.timed(asyncio.events.Handle._run)

    async def both() -> None:
        await asyncio.gather(long_step(), short_step())

    loop = asyncio.new_event_loop()
    original = asyncio.events.Handle._run
    asyncio.events.Handle._run = timed  # type: ignore[method-assign,assignment]
    try:
        loop.run_until_complete(both())
    finally:
        asyncio.events.Handle._run = original  # type: ignore[method-assign]
        loop.close()
    tasks = [task for _, _, task in recorder.slices]
    assert "long_step" in tasks
    assert "short_step" not in tasks
    assert recorder.callbacks >= 2
    assert recorder.callback_cpu_s >= 0.003
    assert (recorder.frozen_at is not None) == (gc.get_freeze_count() > 0)


def test_the_recorder_times_a_collection() -> None:
    recorder = LoopRecorder()
    gc.callbacks.append(recorder.on_gc)
    try:
        gc.collect()
    finally:
        gc.callbacks.remove(recorder.on_gc)
    assert [gen for _, gen, _, _ in recorder.collections] == [2]


def test_the_summary_groups_slices_and_counts_collections_after_the_freeze() -> None:
    record = {
        "callbacks": 1000,
        "callback_cpu_s": 0.5,
        "slices": [
            [10.0, 0.090, "_run_app"],  # startup, before the freeze
            [101.0, 0.004, "warm-up"],  # within skip_s of the freeze
            [110.0, 0.002, "RequestHandler._handle_request"],
            [111.0, 0.015, "RequestHandler._handle_request"],
            [112.0, 0.003, "OtlpPipeline.post"],
        ],
        "collections": [[50.0, 2, 0.3, False], [100.0, 2, 0.08, True], [115.0, 0, 0.004, True]],
        "frozen_at": 100.0,
    }
    lines = summary(record, skip_s=3.0)
    assert lines[0] == "1000 loop callbacks, 0.50 s of CPU"
    assert lines[1] == ("slices >= 1 ms: 2 x RequestHandler._handle_request, longest 15.0 ms CPU")
    assert lines[2] == "slices >= 1 ms: 1 x OtlpPipeline.post, longest 3.0 ms CPU"
    assert "collections of generation 0 after the freeze: 1, longest 4.00 ms CPU" in lines[3]
    assert "collections of generation 2 after the freeze: 1, longest 80.00 ms CPU" in lines[4]
    assert len(lines) == 5


def test_the_summary_says_when_nothing_was_collected() -> None:
    record = {
        "callbacks": 1,
        "callback_cpu_s": 0.0,
        "slices": [],
        "collections": [],
        "frozen_at": None,
    }
    assert summary(record)[-1] == "no garbage collection after the freeze"
