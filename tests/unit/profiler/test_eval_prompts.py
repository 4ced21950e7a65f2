"""The eval prompts a report carries for the control plane's category classifier."""

from __future__ import annotations

from contracts.category_model import HEAD_CHARS, TAIL_CHARS
from profiler.evals.accuracy import EvalItem, labelled_prompts


def _item(**kw: object) -> EvalItem:
    return EvalItem.model_validate({"expected": "x", "scorer": "contains", **kw})


def test_each_distinct_prompt_goes_with_its_category() -> None:
    items = [
        _item(prompt="2 + 2 =", category="math", expected=4, scorer="numeric"),
        _item(prompt="2 + 2 =", category="math", expected=4, scorer="numeric"),
        _item(prompt="   ", category="chat"),
        _item(
            messages=[
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": "first question"},
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": "Pull the dates out of this memo."},
            ],
            category="extraction",
        ),
    ]
    assert [(p.text, p.category) for p in labelled_prompts(items)] == [
        ("2 + 2 =", "math"),
        ("Pull the dates out of this memo.", "extraction"),
    ]


def test_long_prompts_are_cut_to_the_window_the_classifier_reads() -> None:
    text = "h" * HEAD_CHARS + "m" * 50_000 + "t" * TAIL_CHARS
    (prompt,) = labelled_prompts([_item(prompt=text, category="chat")])
    assert prompt.text == "h" * HEAD_CHARS + "\n" + "t" * TAIL_CHARS
