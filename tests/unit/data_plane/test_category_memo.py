"""request/category.py: `evaluate_text` remembers recent windows without changing an output,
within MEMO_WINDOWS, per compiled classifier (one per table version)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.category_model import HEAD_CHARS, TAIL_CHARS, CategoryModel
from data_plane.request.category import (
    BUILTIN_MODEL_PATH,
    MEMO_WINDOWS,
    CategoryClassifier,
    compile_classifier,
)
from data_plane.request.prompt_scan import scan_prompt

_MODEL = CategoryModel.model_validate_json(BUILTIN_MODEL_PATH.read_bytes())


def _fresh() -> CategoryClassifier:
    return compile_classifier(_MODEL)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=300), min_size=1, max_size=6))
def test_remembered_outputs_are_the_computed_ones(texts: list[str]) -> None:
    classifier = _fresh()
    for text in texts + texts:
        assert classifier.evaluate_text(text) == classifier.evaluate(scan_prompt(text))


def test_long_prompts_sharing_a_window_share_the_outputs() -> None:
    classifier = _fresh()
    head = "Prove that the sum of two even numbers is even. " * 30
    tail = "Then explain it to a child in two sentences. " * 15
    first = head[:HEAD_CHARS] + "def f(x): return x  # pasted code " * 100 + tail[-TAIL_CHARS:]
    second = head[:HEAD_CHARS] + "SELECT * FROM pasted_table; " * 300 + tail[-TAIL_CHARS:]
    assert classifier.evaluate_text(first) == classifier.evaluate(scan_prompt(first))
    assert classifier.remembered == 1
    assert classifier.evaluate_text(second) == classifier.evaluate(scan_prompt(second))
    assert classifier.remembered == 1  # the same window: one entry


def test_a_caller_changing_its_list_leaves_the_memo_alone() -> None:
    classifier = _fresh()
    text = "Write a Python function that merges two sorted lists."
    probabilities, _ = classifier.evaluate_text(text)
    expected = list(probabilities)
    probabilities[0] = 99.0
    assert classifier.evaluate_text(text)[0] == expected


def test_the_memo_is_bounded_and_keeps_the_recently_used() -> None:
    classifier = _fresh()
    kept = "What is the capital of France?"
    classifier.evaluate_text(kept)
    for i in range(MEMO_WINDOWS + 10):
        classifier.evaluate_text(f"prompt number {i}")
        classifier.evaluate_text(kept)  # used again: never the least recent
    assert classifier.remembered == MEMO_WINDOWS
    assert kept in classifier._memo
    assert "prompt number 0" not in classifier._memo


def test_a_new_table_versions_classifier_starts_empty() -> None:
    old = _fresh()
    old.evaluate_text("Summarise this contract clause.")
    assert old.remembered == 1
    assert _fresh().remembered == 0
