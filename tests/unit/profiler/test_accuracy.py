"""accuracy: eval-set parsing (bad lines named by file and line), identity, per-category sums;
and the shipped eval sets themselves."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from contracts.answer_scoring import Scorer, score
from contracts.names import KNOWN_CATEGORIES
from profiler.evals.accuracy import (
    EvalItem,
    EvalResult,
    EvalSetError,
    eval_set_identity,
    parse_eval_set,
    summarize_accuracy,
)
from profiler.run.profiling import builtin_evalsets

GOOD = [
    {"prompt": "12 + 7 =", "expected": 19, "category": "math", "scorer": "numeric"},
    {
        "messages": [{"role": "user", "content": "Capital of France?"}],
        "expected": "Paris",
        "category": "chat",
        "scorer": "contains",
        "max_tokens": 4,
    },
    {"prompt": "x", "expected": {"a": 1}, "category": "extraction", "scorer": "json"},
]


def _jsonl(*rows: object) -> str:
    return "\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n"


def test_parses_prompt_and_messages_items() -> None:
    items = parse_eval_set(_jsonl(*GOOD, ""), "good.jsonl")
    assert [i.category for i in items] == ["math", "chat", "extraction"]
    assert items[0].scorer is Scorer.NUMERIC
    assert items[0].max_tokens == 16
    assert items[1].messages is not None
    assert items[1].messages[0].content == "Capital of France?"
    assert items[1].max_tokens == 4


def test_every_bad_line_is_named_with_file_and_line() -> None:
    text = _jsonl(
        GOOD[0],
        "{not json",
        "",
        {"prompt": "a", "category": "math", "scorer": "numeric"},
        {"prompt": "a", "expected": "x", "category": "math", "scorer": "numeric"},
        {"prompt": "a", "messages": [{"role": "user", "content": "b"}], "expected": "x",
         "category": "chat", "scorer": "contains"},
        {"prompt": "a", "expected": "(", "category": "code", "scorer": "regex"},
        {"prompt": "a", "expected": "b", "category": "Bad Cat", "scorer": "contains"},
        {"prompt": "a", "expected": "b", "category": "chat", "scorer": "fuzzy"},
        {"messages": [{"role": "robot", "content": "b"}], "expected": "b", "category": "chat",
         "scorer": "contains"},
        {"prompt": "a", "expected": "b", "category": "chat", "scorer": "contains", "extra": 1},
        {"prompt": "a", "expected": 5, "category": "math", "scorer": "numeric", "answer": "6"},
    )  # fmt: skip
    with pytest.raises(EvalSetError) as caught:
        parse_eval_set(text, "sets/bad.jsonl")
    problems = caught.value.problems
    joined = "\n".join(problems)
    assert "sets/bad.jsonl:2: not valid JSON" in joined
    assert not any(p.startswith("sets/bad.jsonl:1:") or ":3:" in p for p in problems)
    assert "sets/bad.jsonl:4: expected: Field required" in joined
    assert "sets/bad.jsonl:5:" in joined
    assert "must be a number" in joined
    assert "sets/bad.jsonl:6:" in joined
    assert "exactly one of `prompt` or `messages`" in joined
    assert "sets/bad.jsonl:7:" in joined
    assert "not a valid regex" in joined
    assert "sets/bad.jsonl:8: category:" in joined
    assert "sets/bad.jsonl:9: scorer:" in joined
    assert "sets/bad.jsonl:10: messages[0].role:" in joined
    assert "sets/bad.jsonl:11: extra:" in joined
    assert "sets/bad.jsonl:12:" in joined
    assert "sample `answer` does not pass" in joined


def test_a_file_without_items_is_an_error() -> None:
    with pytest.raises(EvalSetError, match=r"empty\.jsonl: holds no eval items"):
        parse_eval_set("\n\n", "empty.jsonl")


def test_identity_hashes_every_byte_in_name_order() -> None:
    a, b = ("b.jsonl", b'{"x": 1}\n'), ("a.jsonl", b'{"y": 2}\n')
    ident, sha = eval_set_identity([a, b])
    assert ident == "a+b"
    assert len(sha) == 64
    assert eval_set_identity([b, a]) == (ident, sha)
    assert eval_set_identity([a, ("a.jsonl", b'{"y": 3}\n')])[1] != sha
    long_names = [(f"{'n' * 60}{i}.jsonl", b"") for i in range(5)]
    assert len(eval_set_identity(long_names)[0]) <= 200


def test_accuracy_per_category_with_counts_and_wilson_interval() -> None:
    results = [EvalResult("math", True)] * 8 + [EvalResult("math", False)] * 2
    results += [EvalResult("chat", False, error="HTTP 500: boom")]
    summary = {a.category: a for a in summarize_accuracy(results)}
    assert list(summary) == ["chat", "math"]
    math_acc = summary["math"]
    assert (math_acc.n, math_acc.accuracy) == (10, 0.8)
    assert math_acc.ci_low == pytest.approx(0.4902, abs=1e-4)
    assert math_acc.ci_high == pytest.approx(0.9433, abs=1e-4)
    assert (summary["chat"].n, summary["chat"].accuracy) == (1, 0.0)


def _builtin_items() -> list[EvalItem]:
    items: list[EvalItem] = []
    for path in builtin_evalsets():
        items += parse_eval_set(path.read_text(encoding="utf-8"), str(path))
    return items


def test_shipped_eval_sets_cover_the_known_categories_with_at_least_100_items() -> None:
    """Rewritten for issue 12 (was 20 to 40 items): 100 generated items per category join the
    hand-written ones, so accuracies mean something (docs/accuracy.md)."""
    items = _builtin_items()
    counts = Counter(i.category for i in items)
    assert set(counts) == set(KNOWN_CATEGORIES)
    assert all(100 <= n <= 200 for n in counts.values()), counts
    stems = {Path(p).stem for p in builtin_evalsets()}
    assert stems == set(KNOWN_CATEGORIES) | {f"{c}-generated" for c in KNOWN_CATEGORIES}


def test_shipped_items_are_short_completion_prompts_with_unique_text() -> None:
    items = _builtin_items()
    prompts = [i.prompt for i in items]
    assert all(p is not None for p in prompts), "base models have no chat template"
    assert len(set(prompts)) == len(prompts)
    assert all(i.max_tokens <= 24 for i in items)
    assert len({i.id for i in items}) == len(items)
    # items with a sample answer accept it; a plainly wrong answer is rejected
    assert all(score(i.answer, i.expected, i.scorer, i.tolerance) for i in items if i.answer)
    assert not any(score(" I am not sure.", i.expected, i.scorer, i.tolerance) for i in items)
