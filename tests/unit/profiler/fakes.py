"""A function-backed CompletionClient for runner tests: no network, a synthetic clock."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from profiler.engine.client import RequestFailedError
from profiler.evals.accuracy import EvalItem
from profiler.stats import TimedStream


class FakeClient:
    """Answers streams with 10 ms TTFT and 2 ms per token on a synthetic clock (one second per
    call, so windows are exact), and eval items through `answer`. Tracks concurrency."""

    def __init__(
        self,
        fail_calls: frozenset[int] = frozenset(),
        answer: Callable[[EvalItem], str] = lambda item: "",
        chars_per_token: float = 5.0,
        block_after: int | None = None,
    ) -> None:
        self.fail_calls = fail_calls
        self.answer = answer
        self.chars_per_token = chars_per_token
        self.block_after = block_after
        self.calls = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.prompts: list[str] = []
        self.released = asyncio.Event()

    async def stream_completion(self, prompt: str, max_tokens: int) -> TimedStream:
        self.calls += 1
        call = self.calls
        self.prompts.append(prompt)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.block_after is not None and call > self.block_after:
                await self.released.wait()
            for _ in range(3):
                await asyncio.sleep(0)
            if call in self.fail_calls:
                raise RequestFailedError("HTTP 503: busy")
            start = float(call)
            first = start + 0.010
            times = tuple(first + 0.002 * k for k in range(max_tokens))
            return TimedStream(
                started_s=start,
                token_times_s=times,
                finished_s=times[-1],
                prompt_chars=len(prompt),
                prompt_tokens=max(1, round(len(prompt) / self.chars_per_token)),
                completion_tokens=max_tokens,
            )
        finally:
            self.in_flight -= 1

    async def complete(self, item: EvalItem) -> str:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0)
            return self.answer(item)
        finally:
            self.in_flight -= 1
