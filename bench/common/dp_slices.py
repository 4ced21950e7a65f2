"""The data plane with a recorder of what holds its event loop, for `bench.overhead.loop_slices`.

`BENCH_LOOP_SLICES_OUT=OUT.json python -m bench.common.dp_slices serve` runs the data plane
as built on the plain asyncio loop (the runner sets GEARBOX_DP_EVENT_LOOP=asyncio: uvloop's
callbacks are C and cannot be timed from Python) and records, in CPU time of the loop's
thread (preemption by other processes does not count): every loop callback longer than
SLICE_MS with the task it stepped, and every garbage collection with its generation, CPU
time and whether the heap was frozen by then (`gc.freeze()` after startup). At exit it
writes them to OUT.json.
Timing the callbacks wraps `asyncio.events.Handle._run` in this process only; nothing in the
data plane's code changes.
"""

from __future__ import annotations

import asyncio
import atexit
import gc
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from data_plane.__main__ import main as serve

SLICE_MS = 1.0  # callbacks at least this long (CPU) are kept
OUT_VARIABLE = "BENCH_LOOP_SLICES_OUT"


def _task_name(callback: Callable[..., Any]) -> str:
    """The coroutine a task step runs (its qualified name), else the callback's repr."""
    task = getattr(callback, "__self__", None)
    if isinstance(task, asyncio.Task):
        coro = task.get_coro()
        return str(getattr(coro, "__qualname__", coro))
    return repr(callback).split(" at 0x")[0].split(" of <")[0][:120]


class LoopRecorder:
    """Slices of the loop's thread over `slice_ms` and garbage collections, in CPU time."""

    def __init__(self, slice_ms: float = SLICE_MS) -> None:
        self.slice_s = slice_ms / 1000
        self.slices: list[tuple[float, float, str]] = []  # (wall time, CPU s, task)
        self.callbacks = 0
        self.callback_cpu_s = 0.0
        self.collections: list[tuple[float, int, float, bool]] = []  # (wall, gen, CPU s, frozen)
        self._gc_started = 0.0
        self.frozen_at: float | None = None  # when a callback first found the heap frozen

    def on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_started = time.thread_time()
            return
        cpu = time.thread_time() - self._gc_started
        frozen = gc.get_freeze_count() > 0
        self.collections.append((time.monotonic(), info["generation"], cpu, frozen))

    def timed(self, run: Callable[[asyncio.Handle], None]) -> Callable[[asyncio.Handle], None]:
        """`Handle._run` that records its CPU time."""

        def _run(handle: asyncio.Handle) -> None:
            started = time.thread_time()
            run(handle)
            cpu = time.thread_time() - started
            if self.frozen_at is None and gc.get_freeze_count():
                self.frozen_at = time.monotonic()
            self.callbacks += 1
            self.callback_cpu_s += cpu
            if cpu >= self.slice_s:
                name = _task_name(handle._callback)  # type: ignore[attr-defined]
                self.slices.append((time.monotonic(), cpu, name))

        return _run

    def as_json(self) -> dict[str, Any]:
        return {
            "callbacks": self.callbacks,
            "callback_cpu_s": self.callback_cpu_s,
            "slices": self.slices,
            "collections": self.collections,
            "frozen_at": self.frozen_at,
        }


def main(argv: Sequence[str] | None = None) -> int:
    out = Path(os.environ[OUT_VARIABLE])
    recorder = LoopRecorder()
    gc.callbacks.append(recorder.on_gc)
    handle_run = asyncio.events.Handle._run
    asyncio.events.Handle._run = recorder.timed(handle_run)  # type: ignore[method-assign,assignment]
    atexit.register(lambda: out.write_text(json.dumps(recorder.as_json())))
    return serve(argv)


if __name__ == "__main__":
    sys.exit(main())
