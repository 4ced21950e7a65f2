"""Code items scored by their tests (`contracts/code_tests.py`, docs/accuracy.md "Code items"):
the program an answer makes, and the sandboxed runner, against right, wrong and hostile code."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from contracts.answer_scoring import Scorer
from contracts.code_tests import (
    CodeLimits,
    CodeTestRunner,
    Scoring,
    chat_code,
    check_tests,
    completion_code,
    program,
    score_answer,
    score_answer_blocking,
)
from tests.support.waiting import eventually

PROMPT = 'def add(a, b):\n    """Return the sum of a and b."""\n'
TESTS = "assert add(2, 3) == 5\nassert add(-4, 4) == 0\n"
# The item's text scorer: what canary items were scored by before (text only).
ITEM = Scoring(PROMPT, r"a\s*\+\s*b", Scorer.REGEX, tests=TESTS)
LIMITS = CodeLimits(cpu_s=1, wall_s=30.0)  # a right answer is never cut by a loaded machine


@pytest.fixture
def runner() -> CodeTestRunner:
    return CodeTestRunner(LIMITS)


def test_a_completion_is_cut_where_its_function_ends() -> None:
    answer = "    return a + b\n\n\ndef test():\n    assert add(1, 1) == 3\n"
    assert completion_code(answer) == "    return a + b\n\n"
    assert completion_code("    return a + b") == "    return a + b"
    assert program(PROMPT, answer, TESTS) == f"{PROMPT}    return a + b\n\n\n\n{TESTS}\n"


def test_a_chat_answers_code_is_its_first_fenced_block() -> None:
    answer = "Here it is:\n```python\ndef f(x):\n    return x\n```\nand ```py\nf = None\n```"
    assert chat_code(answer) == "def f(x):\n    return x\n"
    assert chat_code("def f(x): return x") == "def f(x): return x"
    assert (
        program("", answer, "assert f(1) == 1") == "def f(x):\n    return x\n\n\nassert f(1) == 1\n"
    )


def test_tests_must_be_python_that_compiles() -> None:
    assert check_tests(TESTS) == TESTS
    with pytest.raises(ValueError, match="non-empty Python source"):
        check_tests("  ")
    with pytest.raises(ValueError, match="non-empty Python source"):
        check_tests(["assert True"])
    with pytest.raises(ValueError, match=r"not valid Python: .* \(line 2\)"):
        check_tests("assert True\nassert (\n")


async def test_a_right_answer_in_other_words_passes_and_a_close_wrong_one_fails(
    runner: CodeTestRunner,
) -> None:
    """Scored by what the code does: other names and layout pass; one character off fails,
    though the text scorer accepts it."""
    other_words = "    total=b+a\n    return (total)\n"
    close_but_wrong = "    return a + b + 1\n"
    assert await score_answer(runner, other_words, ITEM)
    assert not await score_answer(runner, close_but_wrong, ITEM)
    assert score_answer_blocking(runner, other_words, ITEM)
    assert not score_answer_blocking(runner, close_but_wrong, ITEM)


async def test_an_item_without_tests_keeps_its_text_scorer(runner: CodeTestRunner) -> None:
    text_only = Scoring(PROMPT, r"a\s*\+\s*b", Scorer.REGEX)
    assert await score_answer(runner, "    return a + b + 1\n", text_only)
    assert not await score_answer(runner, "    total=b+a\n", text_only)


HOSTILE = {
    "an endless loop": "    while True:\n        pass\n",
    "a fork bomb": "    import os\n    while True:\n        os.fork()\n",
    "a subprocess": "    import subprocess\n    subprocess.run(['true'])\n    return a + b\n",
    "a 200 MB print": "    print('x' * 200_000_000)\n",
    "memory past the limit": "    x = bytearray(2**31)\n    return a + b\n",
    "an early os._exit(0)": "    import os\n    os._exit(0)\n",
    "an early sys.exit(0)": "    import sys\n    sys.exit(0)\n",
    "a socket": "    import socket\n    socket.socket()\n    return a + b\n",
    "a signal to its parent": "    import os\n    os.kill(os.getppid(), 0)\n    return a + b\n",
}


@pytest.mark.parametrize("answer", HOSTILE.values(), ids=HOSTILE.keys())
async def test_hostile_code_is_wrong_within_the_limits(runner: CodeTestRunner, answer: str) -> None:
    assert not await score_answer(runner, answer, ITEM)


async def test_a_sleeping_answer_is_killed_at_the_wall_limit() -> None:
    """No CPU spent, so only the wall limit ends it: the child's group is killed."""
    short = CodeTestRunner(CodeLimits(cpu_s=1, wall_s=1.0))
    answer = "    import time\n    time.sleep(3600)\n    return a + b\n"
    assert not await score_answer(short, answer, ITEM)
    assert not short.passes_blocking(program(PROMPT, answer, TESTS))


async def test_the_answer_writes_no_file(runner: CodeTestRunner, tmp_path: Path) -> None:
    target = tmp_path / "written"
    answer = f"    open({str(target)!r}, 'w').write('x')\n    return a + b\n"
    assert not await score_answer(runner, answer, ITEM)
    assert not target.exists()


async def test_the_answer_sees_no_environment(
    runner: CodeTestRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GEARBOX_SECRET_FOR_TEST", "s3cret")
    assert os.environ["GEARBOX_SECRET_FOR_TEST"] == "s3cret"
    reads = (
        "    import os\n    assert 'GEARBOX_SECRET_FOR_TEST' not in os.environ\n    return a + b\n"
    )
    assert await score_answer(runner, reads, ITEM)


class _Counting(CodeTestRunner):
    """Counts the programs running at once (each child held on its own gate)."""

    running = 0
    most = 0

    async def _run(self, code: str, folder: str) -> bool:
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            return await super()._run(code, folder)
        finally:
            self.running -= 1


async def test_at_most_at_once_programs_run_at_a_time(tmp_path: Path) -> None:
    runner = _Counting(LIMITS, at_once=2)
    gates = [tmp_path / f"gate{i}" for i in range(3)]
    for gate in gates:
        os.mkfifo(gate)
    held = [f"    open({str(gate)!r}).read()\n    return a + b\n" for gate in gates]
    once = Scoring(PROMPT, ITEM.expected, ITEM.scorer, tests="assert add(2, 3) == 5")
    scoring = [asyncio.create_task(score_answer(runner, answer, once)) for answer in held]
    try:
        await eventually(lambda: runner.running == 2, timeout_s=60.0, what="two children")
        for gate in gates:  # each child waits on its gate: released in turn as they come
            os.close(await _writer(gate))
        assert await asyncio.wait_for(asyncio.gather(*scoring), timeout=60.0) == [True] * 3
    finally:
        for task in scoring:
            task.cancel()
        await asyncio.gather(*scoring, return_exceptions=True)
    assert runner.most == 2


async def _writer(fifo: Path) -> int:
    """`fifo`'s write end, once a child holds its read end."""
    opened: list[int] = []

    def reader_came() -> bool:
        try:
            opened.append(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            return False
        return True

    await eventually(reader_came, timeout_s=60.0, what=f"a child opened {fifo.name}")
    return opened[0]
