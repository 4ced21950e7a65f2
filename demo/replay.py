"""Send the jobs through the data plane with `openai.AsyncOpenAI`, `concurrency` at a time.

Records what a client sees: the pair from `X-Route-Pair`, status, end-to-end and first-token
time (perf_counter), the answer graded against the eval item, and `usage`. An item with
`tests` (code) is graded by running them against the answer, as the profiler scores it
(`contracts.code_tests`: a sandboxed child, at most 2 at once, awaited off the loop); any other
by its text scorer.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import openai
from openai import AsyncOpenAI

from contracts.code_tests import CodeTestRunner, score_answer
from demo.workload import Job


@dataclass(frozen=True, slots=True)
class Outcome:
    """What happened to one job. `correct` is None for prompts without a known answer."""

    job: Job
    status: int
    pair: str | None
    reason: str | None
    latency_s: float
    ttft_s: float | None
    text: str
    prompt_tokens: int
    completion_tokens: int
    correct: bool | None
    error: str | None = None

    @property
    def budget_met(self) -> bool | None:
        """None when no pair answered; an answer cut short by an error missed its budget."""
        if self.pair is None:
            return None
        return self.error is None and self.latency_s <= self.job.latency_budget_s


def make_client(data_plane_url: str, timeout_s: float = 300.0) -> AsyncOpenAI:
    """The official client, pointed at the router; no SDK retries (the router retries)."""
    return AsyncOpenAI(
        base_url=f"{data_plane_url}/v1",
        api_key="gearbox-demo",
        max_retries=0,
        timeout=timeout_s,
    )


async def _grade(code: CodeTestRunner, job: Job, text: str) -> bool | None:
    if job.item is None:
        return None
    return await score_answer(code, text, job.item.scoring)


async def _send_plain(client: AsyncOpenAI, job: Job, model: str, code: CodeTestRunner) -> Outcome:
    start = time.perf_counter()
    raw = await client.completions.with_raw_response.create(
        model=model,
        prompt=job.prompt,
        max_tokens=job.max_tokens,
        temperature=0,
        extra_headers=dict(job.headers),
    )
    completion = raw.parse()
    latency = time.perf_counter() - start
    text = completion.choices[0].text if completion.choices else ""
    usage = completion.usage
    return Outcome(
        job,
        raw.status_code,
        raw.headers.get("x-route-pair"),
        raw.headers.get("x-route-reason"),
        latency,
        None,
        text,
        usage.prompt_tokens if usage else 0,
        usage.completion_tokens if usage else 0,
        await _grade(code, job, text),
    )


async def _send_stream(client: AsyncOpenAI, job: Job, model: str, code: CodeTestRunner) -> Outcome:
    """A streamed job. A stream the router ends with an error event (e.g. the latency budget
    ran out after the first byte) is an answer from that pair that missed its budget."""
    start = time.perf_counter()
    first: float | None = None
    parts: list[str] = []
    usage = (0, 0)
    error: str | None = None
    async with client.completions.with_streaming_response.create(
        model=model,
        prompt=job.prompt,
        max_tokens=job.max_tokens,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
        extra_headers=dict(job.headers),
    ) as response:
        try:
            async for chunk in await response.parse():
                if chunk.choices and chunk.choices[0].text:
                    first = first if first is not None else time.perf_counter() - start
                    parts.append(chunk.choices[0].text)
                if chunk.usage:
                    usage = (chunk.usage.prompt_tokens, chunk.usage.completion_tokens)
        except openai.APIError as err:
            error = f"stream ended early: {err.message}"
        status, headers = response.status_code, response.headers
    text = "".join(parts)
    return Outcome(
        job,
        status,
        headers.get("x-route-pair"),
        headers.get("x-route-reason"),
        time.perf_counter() - start,
        first,
        text,
        *usage,
        None if error else await _grade(code, job, text),
        error,
    )


SHED_RETRIES = 2  # as the OpenAI SDKs' default: a shed 429 says when to come back
MAX_RETRY_AFTER_S = 5.0


def _retry_after_s(err: openai.APIStatusError) -> float | None:
    """How long a shed request (429 with `x-should-retry: true`) is told to wait, else None."""
    headers = err.response.headers
    if err.status_code != 429 or headers.get("x-should-retry") != "true":
        return None
    try:
        return min(max(float(headers.get("retry-after", "1")), 0.0), MAX_RETRY_AFTER_S)
    except ValueError:
        return 1.0


async def send(client: AsyncOpenAI, job: Job, model: str, code: CodeTestRunner) -> Outcome:
    """One job; an API error becomes an Outcome with its status and message, never a raise.
    A request the router sheds is sent again after its `Retry-After`, at most `SHED_RETRIES`
    times, as the SDKs do (their other retries stay off: the router retries engines itself);
    its latency counts from the first send."""
    start = time.perf_counter()
    for retry in range(SHED_RETRIES + 1):
        waited_s = time.perf_counter() - start
        try:
            outcome = await _send_once(client, job, model, code)
        except openai.APIStatusError as err:
            wait_s = _retry_after_s(err)
            if wait_s is None or retry == SHED_RETRIES:
                return _failed(job, err, time.perf_counter() - start)
            await asyncio.sleep(wait_s)
            continue
        if not retry:
            return outcome
        ttft_s = None if outcome.ttft_s is None else outcome.ttft_s + waited_s
        return replace(outcome, latency_s=outcome.latency_s + waited_s, ttft_s=ttft_s)
    raise AssertionError("unreachable: the last try returns")


async def _send_once(client: AsyncOpenAI, job: Job, model: str, code: CodeTestRunner) -> Outcome:
    start = time.perf_counter()
    try:
        if job.stream:
            return await _send_stream(client, job, model, code)
        return await _send_plain(client, job, model, code)
    except openai.APIStatusError:
        raise
    except openai.APIError as err:
        return Outcome(job, 0, None, None, time.perf_counter() - start, None, "", 0, 0, None,
                       error=f"{type(err).__name__}: {err.message}")  # fmt: skip


def _failed(job: Job, err: openai.APIStatusError, elapsed_s: float) -> Outcome:
    pair = err.response.headers.get("x-route-pair")
    return Outcome(job, err.status_code, pair, None, elapsed_s, None, "", 0, 0, None,
                   error=f"{err.status_code}: {err.message}")  # fmt: skip


async def replay(
    client: AsyncOpenAI,
    jobs: Sequence[Job],
    concurrency: int,
    model: str = "auto",
    code: CodeTestRunner | None = None,
) -> list[Outcome]:
    """Send every job, `concurrency` in flight; outcomes in job order. Code items with tests
    are graded by `code` (a sandboxed runner, 2 programs at once unless given)."""
    slots = asyncio.Semaphore(concurrency)
    runner = code if code is not None else CodeTestRunner()
    done = 0

    async def one(job: Job) -> Outcome:
        nonlocal done
        async with slots:
            outcome = await send(client, job, model, runner)
        done += 1
        if done % max(1, len(jobs) // 10) == 0 or done == len(jobs):
            print(f"  {done}/{len(jobs)} requests answered", flush=True)
        return outcome

    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(one(job)) for job in jobs]
    return [task.result() for task in tasks]
