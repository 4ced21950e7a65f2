"""runner: closed and open loops, warm-up exclusion, error counting, calibration, evals, and
what a cancelled level keeps."""

from __future__ import annotations

import asyncio

import pytest

from profiler.engine.client import RequestFailedError
from profiler.evals.accuracy import EvalItem, EvalResult
from profiler.load.runner import Calibration, LevelRecorder, LoadRunner, run_evals
from profiler.load.workload import LoadLevel
from profiler.stats import RequestTiming
from tests.support.waiting import eventually
from tests.unit.profiler.fakes import FakeClient


async def test_closed_loop_keeps_exactly_concurrency_requests_in_flight() -> None:
    client = FakeClient()
    recorder = LevelRecorder(LoadLevel(3, 64, 8, requests=10, warmup=2))
    steps: list[int] = []
    await LoadRunner(client, Calibration()).run_level(0, recorder, steps.append)
    assert client.calls == 12
    assert client.max_in_flight == 3
    assert len(recorder.timings) == 10  # the two warm-up requests are not recorded
    assert sum(steps) == 12
    sample = recorder.sample()
    assert sample is not None
    assert sample.ttft_s.p50 == pytest.approx(0.010)
    assert sample.tpot_s.p50 == pytest.approx(0.002)
    assert sample.concurrency == 3


async def test_errors_are_counted_for_measured_requests_only() -> None:
    client = FakeClient(fail_calls=frozenset({1, 5, 6}))  # call 1 is a warm-up request
    recorder = LevelRecorder(LoadLevel(1, 16, 4, requests=6, warmup=2))
    await LoadRunner(client, Calibration()).run_level(0, recorder)
    assert recorder.errors == 2
    assert recorder.error_reasons == ["HTTP 503: busy", "HTTP 503: busy"]
    assert len(recorder.timings) == 4
    sample = recorder.sample()
    assert sample is not None
    assert (sample.requests, sample.errors) == (4, 2)


async def test_a_level_where_everything_failed_has_no_sample() -> None:
    client = FakeClient(fail_calls=frozenset(range(1, 10)))
    recorder = LevelRecorder(LoadLevel(2, 16, 4, requests=4))
    await LoadRunner(client, Calibration()).run_level(0, recorder)
    assert recorder.errors == 4
    assert recorder.sample() is None


async def test_prompts_are_recalibrated_from_usage_prompt_tokens() -> None:
    client = FakeClient(chars_per_token=6.0)
    calibration = Calibration()
    recorder = LevelRecorder(LoadLevel(1, 100, 4, requests=4, warmup=1))
    await LoadRunner(client, calibration).run_level(0, recorder)
    assert len(client.prompts[0]) == pytest.approx(400, abs=1)  # the 4.0 default guess
    assert calibration.chars_per_token == pytest.approx(6.0, rel=0.02)
    assert len(client.prompts[-1]) == pytest.approx(600, rel=0.02)
    sample = recorder.sample()
    assert sample is not None
    assert sample.input_tokens == pytest.approx(100, abs=2)


async def test_open_loop_level_runs_every_request_at_the_rate() -> None:
    client = FakeClient()
    level = LoadLevel(1, 16, 4, requests=20, warmup=0, open_loop_rps=2000.0)
    recorder = LevelRecorder(level)
    await LoadRunner(client, Calibration(), max_in_flight=5).run_level(0, recorder)
    assert client.calls == 20
    assert client.max_in_flight <= 5
    sample = recorder.sample()
    assert sample is not None
    assert sample.open_loop_rate_rps == 2000.0


async def test_cancelled_level_keeps_the_requests_that_finished() -> None:
    client = FakeClient(block_after=5)
    recorder = LevelRecorder(LoadLevel(2, 16, 4, requests=50))
    task = asyncio.create_task(LoadRunner(client, Calibration()).run_level(0, recorder))
    await eventually(lambda: len(recorder.timings) == 5 and client.in_flight == 2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(recorder.timings) == 5
    assert client.in_flight == 0  # the blocked requests were cancelled, not leaked


def _item(prompt: str, expected: str, category: str) -> EvalItem:
    return EvalItem(prompt=prompt, expected=expected, category=category, scorer="contains")


async def test_evals_score_answers_and_count_failures_as_wrong() -> None:
    items = [_item(f"q{i}", "yes", "chat" if i % 2 else "math") for i in range(10)]

    def answer(item: EvalItem) -> str:
        if item.prompt == "q3":
            raise RequestFailedError("HTTP 500: boom")
        return " yes" if item.prompt in {"q0", "q1", "q2"} else " no"

    client = FakeClient(answer=answer)
    results: list[EvalResult] = []
    await run_evals(client, items, concurrency=4, results=results)
    assert len(results) == 10
    assert client.max_in_flight <= 4
    assert sum(r.correct for r in results) == 3
    failed = [r for r in results if r.error]
    assert len(failed) == 1
    assert failed[0].error == "HTTP 500: boom"
    assert not failed[0].correct


def test_calibration_ignores_requests_without_usage() -> None:
    calibration = Calibration()
    assert calibration.chars_per_token == 4.0  # the guess until usage arrives
    calibration.observe(RequestTiming(0.1, 1.0, 3, 0.45, 0.0, 1.0, prompt_chars=999))
    assert calibration.chars_per_token == 4.0
    calibration.observe(RequestTiming(0.1, 1.0, 3, 0.45, 0.0, 1.0, 400, prompt_tokens=100))
    calibration.observe(RequestTiming(0.1, 1.0, 3, 0.45, 0.0, 1.0, 500, prompt_tokens=100))
    assert calibration.chars_per_token == pytest.approx(4.5)


async def test_the_eval_pass_scores_a_code_item_by_its_tests() -> None:
    """The profiler and the canary items score code alike (`contracts.code_tests`): an answer
    in other words passes the item's tests, one token off fails them, whatever the regex
    says; an item without tests keeps its text scorer."""
    prompt = 'def add(a, b):\n    """Return the sum of a and b."""\n'
    coded = {"prompt": prompt, "expected": r"a\s*\+\s*b", "scorer": "regex", "category": "code"}
    items = [
        EvalItem.model_validate({**coded, "id": "other-words", "tests": "assert add(2, 3) == 5"}),
        EvalItem.model_validate({**coded, "id": "one-off", "tests": "assert add(2, 3) == 5"}),
        EvalItem.model_validate({**coded, "id": "text-only"}),
    ]
    answers = {
        "other-words": "    total=b+a\n    return total\n",
        "one-off": "    return a + b + 1\n",
    }
    client = FakeClient(answer=lambda item: answers.get(str(item.id), "    return a + b + 1\n"))
    results: list[EvalResult] = []
    await run_evals(client, items, concurrency=3, results=results)
    assert {r.item: r.correct for r in results} == {
        "other-words": True,
        "one-off": False,
        "text-only": True,
    }
