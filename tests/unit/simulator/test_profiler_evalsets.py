"""The contract with the profiler: on its shipped eval sets, the simulator's right answer passes
the profiler's own scorer and the wrong answer fails it, so measured accuracy is the configured one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contracts.answer_scoring import Scorer, score
from simulator.answer_key import WRONG_ANSWER, index_lines, parse_lines, render_expected

EVALSETS = sorted((Path(__file__).resolve().parents[3] / "profiler" / "evalsets").glob("*.jsonl"))


def test_eval_sets_are_shipped() -> None:
    assert len(EVALSETS) >= 5


@pytest.mark.parametrize("path", EVALSETS, ids=lambda p: p.name)
def test_right_answer_passes_and_wrong_answer_fails(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    lines = parse_lines(text, str(path))
    raw = [json.loads(row) for row in text.splitlines() if row.strip()]
    assert len(lines) == len(raw) > 0
    for line, row in zip(lines, raw, strict=True):
        tolerance = float(row.get("tolerance", 0.0))
        scorer = Scorer(line.scorer)
        assert score(render_expected(line), line.expected, scorer, tolerance), row.get("id")
        assert not score(WRONG_ANSWER, line.expected, scorer, tolerance), row.get("id")
    assert len(index_lines(lines)) == len(lines), "every prompt is distinct"
