"""The contract with the profiler: on its shipped eval sets (held-out ones included), the
simulator's right answer passes the profiler's own scorer and the wrong answer fails it, so
measured accuracy is the configured one. A code item with tests is scored by them, as the
profiler scores it (`contracts.code_tests`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contracts.answer_scoring import Scorer
from contracts.code_tests import CodeTestRunner, Scoring, score_answer_blocking
from simulator.answer_key import WRONG_ANSWER, index_lines, parse_lines, render_expected

FOLDER = Path(__file__).resolve().parents[3] / "profiler" / "evalsets"
EVALSETS = sorted(FOLDER.glob("*.jsonl")) + sorted((FOLDER / "holdout").glob("*.jsonl"))


def test_eval_sets_are_shipped() -> None:
    assert len(EVALSETS) >= 5


@pytest.mark.parametrize("path", EVALSETS, ids=lambda p: str(p.relative_to(FOLDER)))
def test_right_answer_passes_and_wrong_answer_fails(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    lines = parse_lines(text, str(path))
    raw = [json.loads(row) for row in text.splitlines() if row.strip()]
    assert len(lines) == len(raw) > 0
    code = CodeTestRunner()
    for line, row in zip(lines, raw, strict=True):
        tolerance = float(row.get("tolerance", 0.0))
        item = Scoring(line.prompt or "", line.expected, Scorer(line.scorer), tolerance, line.tests)
        assert score_answer_blocking(code, render_expected(line), item), row.get("id")
        assert not score_answer_blocking(code, WRONG_ANSWER, item), row.get("id")
    assert len(index_lines(lines)) == len(lines), "every prompt is distinct"
