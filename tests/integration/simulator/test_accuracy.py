"""Known-answer prompts: right with accuracy[category] (within sampling error), reproducibly."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest

from contracts.answer_scoring import Scorer
from contracts.code_tests import CodeTestRunner, Scoring, score_answer
from simulator.answer_key import WRONG_ANSWER
from simulator.config import SimFleetConfig
from simulator.fleet import run_fleet
from tests.integration.simulator.conftest import pair_config

pytestmark = pytest.mark.integration
NAME = "sim-model"
N = 300


def write_key(path: Path) -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = []
    for i in range(N):
        if i % 2:
            lines.append({"id": i, "prompt": f"What is {i} + {i}?", "expected": 2 * i,
                          "category": "math", "scorer": "numeric"})  # fmt: skip
        else:
            lines.append({"id": i, "messages": [{"role": "user", "content": f"Capital #{i}?"}],
                          "expected": {"city": f"C{i}"}, "category": "extraction",
                          "scorer": "json"})  # fmt: skip
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return lines


async def ask(api: openai.AsyncOpenAI, line: dict[str, Any]) -> str:
    if "prompt" in line:
        text = await api.completions.create(model=NAME, prompt=line["prompt"], max_tokens=50)
        assert text.choices[0].finish_reason == "stop"
        return text.choices[0].text
    chat = await api.chat.completions.create(model=NAME, messages=line["messages"], max_tokens=50)
    assert chat.choices[0].finish_reason == "stop"
    return chat.choices[0].message.content or ""


def grade(line: dict[str, Any], answer: str) -> bool:
    if line["scorer"] == "numeric":
        return answer != WRONG_ANSWER and float(answer) == line["expected"]
    try:
        return bool(json.loads(answer) == line["expected"])
    except json.JSONDecodeError:
        return False


async def run_eval(config: SimFleetConfig, lines: list[dict[str, Any]]) -> list[bool]:
    async with (
        run_fleet(config) as fleet,
        openai.AsyncOpenAI(base_url=fleet.url(NAME) + "/v1", api_key="x", max_retries=0) as api,
    ):
        semaphore = asyncio.Semaphore(16)

        async def one(line: dict[str, Any]) -> bool:
            async with semaphore:
                answer = await ask(api, line)
            assert grade(line, answer) or answer == WRONG_ANSWER
            return grade(line, answer)

        results = list(await asyncio.gather(*(one(line) for line in lines)))
        stats = fleet.stats(NAME)
    assert (stats.known_answers, stats.correct_answers) == (N, sum(results))
    return results


def within_sampling_error(results: list[bool], p: float) -> bool:
    sigma = math.sqrt(p * (1 - p) / len(results))
    return abs(sum(results) / len(results) - p) <= 4 * sigma


async def test_accuracy_per_category_within_sampling_error(tmp_path: Path) -> None:
    lines = write_key(tmp_path / "key.jsonl")
    pair = pair_config(
        NAME, ttft_base_s=0, tpot_base_s=0, accuracy={"math": 0.9, "extraction": 0.3}, seed=11
    )
    config = SimFleetConfig(pairs=[pair], answer_keys=[tmp_path / "key.jsonl"])
    results = await run_eval(config, lines)
    math_results = [r for r, line in zip(results, lines, strict=True) if line["category"] == "math"]
    extraction = [r for r, line in zip(results, lines, strict=True) if line["category"] != "math"]
    assert within_sampling_error(math_results, 0.9)
    assert within_sampling_error(extraction, 0.3)
    assert await run_eval(config, lines) == results  # same seed, same answers


async def test_missing_category_defaults_to_a_coin_flip(tmp_path: Path) -> None:
    lines = write_key(tmp_path / "key.jsonl")
    pair = pair_config(NAME, ttft_base_s=0, tpot_base_s=0, seed=3)
    results = await run_eval(
        SimFleetConfig(pairs=[pair], answer_keys=[tmp_path / "key.jsonl"]), lines
    )
    assert within_sampling_error(results, 0.5)


async def test_ignore_eos_pads_a_known_answer(tmp_path: Path, http: aiohttp.ClientSession) -> None:
    (tmp_path / "k.jsonl").write_text(
        '{"prompt": "2+2?", "expected": 4, "category": "math", "scorer": "numeric"}\n'
    )
    pair = pair_config(NAME, accuracy={"math": 1.0})
    config = SimFleetConfig(pairs=[pair], answer_keys=[tmp_path / "k.jsonl"])
    async with run_fleet(config) as fleet:
        body = {"model": NAME, "prompt": " 2+2? ", "max_tokens": 6, "ignore_eos": True}
        async with http.post(fleet.url(NAME) + "/v1/completions", json=body) as resp:
            padded = await resp.json()
        body = {"model": NAME, "prompt": "2+2?"}
        async with http.post(fleet.url(NAME) + "/v1/completions", json=body) as resp:
            plain = await resp.json()
    assert padded["usage"]["completion_tokens"] == 6
    assert padded["choices"][0]["finish_reason"] == "length"
    assert padded["choices"][0]["text"].startswith("4 ")
    assert plain["choices"][0]["text"] == "4"
    assert plain["choices"][0]["finish_reason"] == "stop"
    assert plain["usage"]["completion_tokens"] == 1


CODE_N = 200


def write_code_key(path: Path) -> list[dict[str, Any]]:
    """Code items with tests and a sample answer that passes them; their text scorer
    (`contains`) is one the tests, not the text, overrule (`contracts.code_tests`)."""
    lines: list[dict[str, Any]] = []
    for i in range(CODE_N):
        base = {"id": f"code-{i}", "category": "code", "scorer": "contains"}
        if i % 2:
            prompt = f'def plus_{i}(x):\n    """Return x plus {i}."""\n'
            lines.append({**base, "prompt": prompt, "expected": "return",
                          "tests": f"assert plus_{i}(1) == {i + 1}\n",
                          "answer": f"    return x + {i}\n"})  # fmt: skip
        else:
            ask_for = [{"role": "user", "content": f"Write times_{i}(x): x times {i}."}]
            code = f"```python\ndef times_{i}(x):\n    return x * {i}\n```"
            tests = f"assert times_{i}(3) == {3 * i}\n"
            lines.append({**base, "messages": ask_for, "expected": f"times_{i}",
                          "tests": tests, "answer": code})  # fmt: skip
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return lines


async def test_code_items_with_tests_are_right_at_the_configured_accuracy(tmp_path: Path) -> None:
    """Scored as the profiler scores them (by their tests, 2 programs at once), the
    simulator's answers to code items with tests are right at `accuracy["code"]` within the
    binomial spread, and each is right exactly when the simulator meant it to be. On 9a8aa4a
    the simulator answered the `contains` text, which fails the tests: 0 right of 200."""
    lines = write_code_key(tmp_path / "code.jsonl")
    pair = pair_config(NAME, ttft_base_s=0, tpot_base_s=0, accuracy={"code": 0.7}, seed=5)
    config = SimFleetConfig(pairs=[pair], answer_keys=[tmp_path / "code.jsonl"])
    runner = CodeTestRunner(at_once=2)
    async with (
        run_fleet(config) as fleet,
        openai.AsyncOpenAI(base_url=fleet.url(NAME) + "/v1", api_key="x", max_retries=0) as api,
    ):
        semaphore = asyncio.Semaphore(16)

        async def one(line: dict[str, Any]) -> tuple[bool, bool]:
            async with semaphore:
                answer = await ask(api, line)
            item = Scoring(line.get("prompt", ""), line["expected"], Scorer.CONTAINS,
                           tests=line["tests"])  # fmt: skip
            return await score_answer(runner, answer, item), answer != WRONG_ANSWER

        marks = list(await asyncio.gather(*(one(line) for line in lines)))
        stats = fleet.stats(NAME)
    results = [passed for passed, _ in marks]
    assert [meant for _, meant in marks] == results
    assert (stats.known_answers, stats.correct_answers) == (CODE_N, sum(results))
    assert within_sampling_error(results, 0.7)
