"""The built-in eval sets: at least 100 items per category, each with a scorer that accepts its
sample answer, the generated part as the generator writes it, and a disjoint held-out set."""

from __future__ import annotations

from collections import Counter

from contracts.code_tests import CodeTestRunner, score_answer
from profiler.evals.accuracy import EvalItem, parse_eval_set
from profiler.evals.evalset_generator import CATEGORIES, FOLDER, expected_files, holdout_sets
from profiler.run.profiling import builtin_evalsets, load_eval_sets


def test_generated_files_are_what_the_generator_writes() -> None:
    for path, text in expected_files().items():
        assert path.read_text(encoding="utf-8") == text, (
            f"{path} is stale: run `python -m profiler.evals.evalset_generator`"
        )


def test_at_least_100_items_per_category_each_scored() -> None:
    items, _, _ = load_eval_sets(builtin_evalsets())  # parsing checks every sample answer
    counts = Counter(i.category for i in items)
    assert set(counts) == set(CATEGORIES)
    assert all(n >= 100 for n in counts.values()), counts
    keys = [i.key for i in items]
    assert len(keys) == len(set(keys))
    assert sum(i.answer is not None for i in items) >= 500


def test_the_holdout_shares_no_prompt_with_the_built_in_sets() -> None:
    assert all(p.parent == FOLDER / "holdout" for p in holdout_sets())
    built_in, _, _ = load_eval_sets(builtin_evalsets())
    held = [i for p in holdout_sets() for i in parse_eval_set(p.read_text(), p.name)]
    generated = {**dict.fromkeys(CATEGORIES, 40), "code": 40 + len(_code_tests_items())}
    assert Counter(i.category for i in held) == generated
    assert not {i.prompt for i in held} & {i.prompt for i in built_in}
    assert not {i.key for i in held} & {i.key for i in built_in}


def _code_tests_items() -> tuple[EvalItem, ...]:
    path = FOLDER / "holdout" / "code-tests.jsonl"
    return parse_eval_set(path.read_text(encoding="utf-8"), path.name)


async def test_the_held_out_code_items_with_tests_pass_their_sample_and_fail_a_wrong_answer() -> (
    None
):
    """The hand-written held-out code items carry tests (the canary items send them): each
    item's sample `answer` passes its tests, and the simulator's wrong answer does not."""
    items = _code_tests_items()
    assert len(items) >= 5
    assert all(i.category == "code" and i.tests and i.answer for i in items)
    runner = CodeTestRunner()
    for item in items:
        assert await score_answer(runner, item.answer or "", item.scoring), item.key
        assert not await score_answer(runner, "I am not sure.", item.scoring), item.key
