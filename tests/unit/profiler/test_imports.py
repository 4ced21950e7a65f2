"""The pure steps of the two imports: lm-eval samples to per-category outcomes, GuideLLM
benchmarks to load levels (the real tools' files are tested in tests/integration/profiler)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from profiler.errors import InputError
from profiler.reports.guidellm_import import levels
from profiler.reports.lm_eval_import import (
    Sample,
    SamplesFile,
    accuracy_part,
    category_of,
    parse_category_map,
)


def _file(
    task: str, values: list[Any], metric: str = "exact_match", filt: str = "none"
) -> SamplesFile:
    samples = tuple(
        Sample(task, i, filt, {metric: v}, f"{task} question {i}") for i, v in enumerate(values)
    )
    return SamplesFile(Path(f"samples_{task}_2026-01-01T00-00-00.0.jsonl"), "m", "0.4.13", samples)


@pytest.mark.parametrize(
    ("task", "category"),
    [("gsm8k", "math"), ("gsm8k_cot", "math"), ("mmlu_abstract_algebra", "reasoning"),
     ("humaneval", "code"), ("squadv2", "extraction"), ("ifeval", "chat"), ("gsm8kx", None),
     ("my_task", None)],
)  # fmt: skip
def test_default_categories_cover_well_known_tasks_and_their_variants(
    task: str, category: str | None
) -> None:
    assert category_of(task, {}) == category


def test_a_given_category_wins_over_the_default() -> None:
    assert category_of("gsm8k", parse_category_map(["gsm8k=reasoning"])) == "reasoning"


def test_a_bad_category_pair_is_named() -> None:
    with pytest.raises(InputError, match=r"--category 'gsm8k=maths': expected TASK=CATEGORY"):
        parse_category_map(["gsm8k=maths"])


def test_outcomes_counts_and_interval() -> None:
    part = accuracy_part([_file("gsm8k", [1.0, 0.0, 1.0, True])], {})
    (math,) = part.accuracy
    assert (math.category, math.n, math.right, math.outcomes) == ("math", 4, 3, "1011")
    assert math.items == ("gsm8k/0", "gsm8k/1", "gsm8k/2", "gsm8k/3")
    assert math.ci_low < 0.75 < math.ci_high
    assert [p.category for p in part.prompts] == ["math"] * 4


def test_a_metric_that_is_not_right_or_wrong_is_refused() -> None:
    with pytest.raises(InputError, match=r"gsm8k doc 1: f1 = 0.5 is not right \(1\) or wrong"):
        accuracy_part([_file("gsm8k", [1, 0.5], metric="f1")], {})


def test_several_filters_need_one_chosen() -> None:
    files = [_file("gsm8k", [1, 1], filt="strict-match"), _file("gsm8k", [0, 0], filt="flexible")]
    with pytest.raises(InputError, match=r"several filters \(flexible, strict-match\)"):
        accuracy_part(files, {})
    (chosen,) = accuracy_part(files, {}, filter_name="strict-match").accuracy
    assert chosen.outcomes == "11"


def _request(start: float, first: float, end: float, tokens: int) -> dict[str, Any]:
    return {
        "info": {"timings": {"request_start": start, "first_token_iteration": first,
                             "request_end": end}},
        "output_metrics": {"text_tokens": tokens},
        "input_metrics": {"text_tokens": 100},
    }  # fmt: skip


def test_an_arrival_rate_level_gets_its_concurrency_from_littles_law() -> None:
    # 10 requests, one every 0.1 s, each 0.5 s long: measured over the 1.4 s window
    requests = [_request(i * 0.1, i * 0.1 + 0.05, i * 0.1 + 0.5, 10) for i in range(10)]
    strategy = {"type_": "constant", "rate": 10.0}
    bench = {
        "config": {"strategy": strategy},
        "requests": {"successful": requests, "errored": [{}]},
    }
    document = {"benchmarks": [bench]}
    (level,) = levels(document, "r.json")
    assert level.open_loop_rate_rps == 10.0
    assert level.concurrency == 4  # 10 requests / 1.4 s x 0.5 s = 3.6 in flight
    assert (level.requests, level.errors, level.input_tokens) == (10, 1, 100)
    assert level.tpot_s.p50 == pytest.approx(0.05)


def test_a_strategy_the_profiler_cannot_fit_is_named() -> None:
    document = {"benchmarks": [{"config": {"strategy": {"type_": "sweep"}}, "requests": {}}]}
    with pytest.raises(InputError, match=r"r.json: benchmarks\[0\]: strategy 'sweep'"):
        levels(document, "r.json")
