"""The sweep: closed-loop levels (TaskGroup + Semaphore), open-loop levels (seeded Poisson
arrivals), and the eval pass. Results go into recorders as they finish, so a cancelled run
still holds everything it measured.

Adapter over a `CompletionClient` port (the real one is `client.EngineClient`); the statistics
live in `stats`, the prompts and schedules in `workload`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from contracts.code_tests import CodeTestRunner, score_answer
from contracts.profile_report import LatencySample
from profiler.engine.client import RequestFailedError, loop_time
from profiler.evals.accuracy import EvalItem, EvalResult
from profiler.load.workload import (
    DEFAULT_CHARS_PER_TOKEN,
    LoadLevel,
    arrival_offsets_s,
    make_prompt,
    request_seed,
)
from profiler.stats import (
    RequestTiming,
    TimedStream,
    extract_timing,
    summarize_level,
)

Advance = Callable[[int], object]


class CompletionClient(Protocol):
    async def stream_completion(self, prompt: str, max_tokens: int) -> TimedStream: ...

    async def complete(self, item: EvalItem) -> str: ...


@dataclass(slots=True)
class LevelRecorder:
    """What one level measured so far. Warm-up requests are never recorded."""

    level: LoadLevel
    timings: list[RequestTiming] = field(default_factory=list)
    errors: int = 0
    error_reasons: list[str] = field(default_factory=list)

    def record_error(self, reason: str) -> None:
        self.errors += 1
        if len(self.error_reasons) < 5:
            self.error_reasons.append(reason)

    def sample(self) -> LatencySample | None:
        return summarize_level(
            self.timings,
            self.errors,
            concurrency=self.level.concurrency,
            input_tokens=self.level.input_tokens,
            open_loop_rate_rps=self.level.open_loop_rps,
        )


@dataclass(slots=True)
class Calibration:
    """Chars per token, learned from `usage.prompt_tokens` as requests finish, so prompts of
    later requests land closer to their target token count (running sums: O(1) a request)."""

    guess: float = DEFAULT_CHARS_PER_TOKEN
    prompt_chars: int = 0
    prompt_tokens: int = 0

    def observe(self, timing: RequestTiming) -> None:
        if timing.prompt_tokens and timing.prompt_chars:
            self.prompt_chars += timing.prompt_chars
            self.prompt_tokens += timing.prompt_tokens

    @property
    def chars_per_token(self) -> float:
        if not self.prompt_tokens:
            return self.guess
        return self.prompt_chars / self.prompt_tokens


class LoadRunner:
    """Runs load levels against one client; `max_in_flight` caps open-loop levels."""

    def __init__(
        self,
        client: CompletionClient,
        calibration: Calibration,
        max_in_flight: int = 512,
        seed: int = 0,
    ) -> None:
        self._client = client
        self._calibration = calibration
        self._max_in_flight = max_in_flight
        self._seed = seed

    async def run_level(
        self, index: int, recorder: LevelRecorder, advance: Advance = lambda n: None
    ) -> None:
        """Run warm-up + measured requests of `recorder.level`, recording as they finish."""
        level = recorder.level
        if level.open_loop_rps is None:
            await self._closed_loop(index, recorder, advance)
        else:
            await self._open_loop(index, recorder, level.open_loop_rps, advance)

    async def _closed_loop(self, index: int, recorder: LevelRecorder, advance: Advance) -> None:
        slots = asyncio.Semaphore(recorder.level.concurrency)
        async with asyncio.TaskGroup() as group:
            for i in range(recorder.level.total):
                await slots.acquire()
                group.create_task(self._one(index, i, recorder, advance, slots))

    async def _open_loop(
        self, index: int, recorder: LevelRecorder, rate_rps: float, advance: Advance
    ) -> None:
        offsets = arrival_offsets_s(rate_rps, recorder.level.total, request_seed(index, 0))
        slots = asyncio.Semaphore(self._max_in_flight)
        start = loop_time()
        async with asyncio.TaskGroup() as group:
            for i, offset in enumerate(offsets):
                delay = start + offset - loop_time()
                if delay > 0:
                    await asyncio.sleep(delay)
                await slots.acquire()
                group.create_task(self._one(index, i, recorder, advance, slots))

    async def _one(
        self,
        index: int,
        i: int,
        recorder: LevelRecorder,
        advance: Advance,
        slots: asyncio.Semaphore,
    ) -> None:
        level = recorder.level
        try:
            seed = request_seed(index, i, self._seed)
            prompt = make_prompt(level.input_tokens, self._calibration.chars_per_token, seed)
            stream = await self._client.stream_completion(prompt, level.output_tokens)
            timing = extract_timing(stream)
        except RequestFailedError as err:
            if i >= level.warmup:
                recorder.record_error(err.reason)
        else:
            self._calibration.observe(timing)
            if i >= level.warmup:
                recorder.timings.append(timing)
        finally:
            slots.release()
            advance(1)


async def run_evals(
    client: CompletionClient,
    items: Sequence[EvalItem],
    concurrency: int,
    results: list[EvalResult],
    advance: Advance = lambda n: None,
    code: CodeTestRunner | None = None,
) -> None:
    """Ask every item greedily, `concurrency` at a time, appending scored results as they
    finish. A failed request is a wrong answer that carries its error (never dropped). An
    item with `tests` is scored by running them against the answer (`code`, a sandboxed
    runner; `contracts.code_tests`), any other by its text scorer."""
    slots = asyncio.Semaphore(concurrency)
    runner = code if code is not None else CodeTestRunner()

    async def ask(item: EvalItem) -> None:
        try:
            answer = await client.complete(item)
        except RequestFailedError as err:
            results.append(EvalResult(item.category, False, err.reason, item.key))
        else:
            ok = await score_answer(runner, answer, item.scoring)
            results.append(EvalResult(item.category, correct=ok, item=item.key))
        finally:
            slots.release()
            advance(1)

    async with asyncio.TaskGroup() as group:
        for item in items:
            await slots.acquire()
            group.create_task(ask(item))
