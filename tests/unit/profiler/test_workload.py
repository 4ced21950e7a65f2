"""workload: the sweep, seeded prompts of a target length, open-loop arrival schedules."""

from __future__ import annotations

import itertools
import statistics

import pytest

from profiler.load.workload import (
    LoadLevel,
    arrival_offsets_s,
    build_sweep,
    make_prompt,
    request_seed,
)


def test_sweep_covers_every_size_at_every_concurrency_then_open_loop() -> None:
    sweep = build_sweep([4, 1, 2, 2], [128, 512], [32], 10, warmup=2, open_loop_rps=3.0)
    closed = [lv for lv in sweep if lv.open_loop_rps is None]
    assert [(lv.input_tokens, lv.concurrency) for lv in closed] == [
        (128, 1), (128, 2), (128, 4), (512, 1), (512, 2), (512, 4),
    ]  # fmt: skip
    opened = [lv for lv in sweep if lv.open_loop_rps is not None]
    assert [(lv.input_tokens, lv.open_loop_rps) for lv in opened] == [(128, 3.0), (512, 3.0)]
    assert sweep.index(opened[0]) > sweep.index(closed[-1])
    assert all(lv.total == 12 and lv.warmup == 2 for lv in sweep)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"concurrency": []}, "concurrency: needs at least one value"),
        ({"concurrency": [0, 2]}, "concurrency: every value must be >= 1"),
        ({"output_tokens": [1]}, "output_tokens: every value must be >= 2"),
        ({"requests_per_level": 0}, "requests_per_level"),
        ({"warmup": -1}, "warmup"),
        ({"open_loop_rps": 0.0}, "open_loop_rps"),
    ],
)
def test_sweep_rejects_bad_arguments_by_name(kwargs: dict[str, object], message: str) -> None:
    args: dict[str, object] = {
        "concurrency": [1],
        "input_tokens": [8],
        "output_tokens": [8],
        "requests_per_level": 1,
    }
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        build_sweep(**args)  # type: ignore[arg-type]


def test_level_label_names_the_load() -> None:
    assert LoadLevel(4, 128, 32, 10).label == "c=4 in=128 out=32"
    assert LoadLevel(1, 128, 32, 10, open_loop_rps=2.5).label == "2.5 rps in=128 out=32"


@pytest.mark.parametrize(("tokens", "cpt"), [(1, 4.0), (128, 4.0), (512, 3.3), (2000, 4.6)])
def test_prompt_length_follows_tokens_times_chars_per_token(tokens: int, cpt: float) -> None:
    prompt = make_prompt(tokens, cpt, seed=7)
    assert abs(len(prompt) - tokens * cpt) <= 1.0
    assert prompt == prompt.strip()


def test_prompts_are_seeded_and_differ_from_the_first_word() -> None:
    assert make_prompt(64, 4.0, 1) == make_prompt(64, 4.0, 1)
    firsts = {make_prompt(64, 4.0, seed).split()[0] for seed in range(30)}
    assert len(firsts) > 5
    with pytest.raises(ValueError, match="target_tokens must be >= 1"):
        make_prompt(0, 4.0, 1)


def test_request_seeds_are_distinct_across_the_sweep() -> None:
    seeds = {request_seed(level, i) for level in range(20) for i in range(1000)}
    assert len(seeds) == 20 * 1000


def test_arrivals_are_poisson_at_the_rate_and_reproducible() -> None:
    offsets = arrival_offsets_s(4.0, 4000, seed=3)
    assert offsets == arrival_offsets_s(4.0, 4000, seed=3)
    assert offsets[0] == 0.0
    gaps = [b - a for a, b in itertools.pairwise(offsets)]
    assert all(g >= 0 for g in gaps)
    assert statistics.fmean(gaps) == pytest.approx(0.25, rel=0.1)
    # exponential gaps: standard deviation close to the mean
    assert statistics.stdev(gaps) == pytest.approx(0.25, rel=0.15)
    assert arrival_offsets_s(1.0, 0, seed=1) == ()
    with pytest.raises(ValueError, match="rate_rps must be > 0"):
        arrival_offsets_s(0.0, 3, seed=1)
