"""The real demo's size, from the speed its engines showed in the smoke step (demo.sizing).

Speeds are the smoke completions' tok/s: measured here (AMD EPYC, AVX-512 + BF16: 17.9 bf16,
18.5 w8a8, 16.7 w4a16, the closing note's `make demo`) and extrapolated to issue 35's 2-core
AVX2 EPYC by the profiled speed ratio (bf16 44.9 here / 8.2 there at c=4 = 5.48; w8a8 47.1 /
7.2 = 6.54; w4a16 is dropped there), with the engines' start-up measured on each (110 s here,
125 s there + 15 s of set-up check and capabilities).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from contracts.accuracy_bound import lower_bound
from demo.__main__ import parse_args
from demo.profiling import REAL_SWEEP, eval_lines, size_work, sized_sweep
from demo.sizing import (
    CP90_GAP,
    PLANES_S,
    SIZES,
    TARGET_S,
    DemoSize,
    EvalLine,
    pick_size,
    progress_line,
    select_items,
)
from profiler.run.profiling import load_eval_sets

AVX512_SMOKE = [17.9, 18.5, 16.7]
AVX2_SMOKE = [17.9 / 5.48, 18.5 / 6.54]


def shipped_work(size: DemoSize) -> tuple[int, int, int]:
    return size_work(REAL_SWEEP, eval_lines(REAL_SWEEP.evalsets), size)


def test_this_machine_keeps_the_full_profile_and_ends_well_within_ten_minutes() -> None:
    sizing = pick_size(AVX512_SMOKE, 110.0, shipped_work)
    assert sizing is not None
    assert sizing.size == SIZES[0]
    assert sizing.eval_items == 625
    assert sizing.fits
    assert 110.0 + sizing.estimate.total_s + PLANES_S < 0.7 * TARGET_S


def test_a_two_core_avx2_machine_gets_a_smaller_profile_that_fits_ten_minutes() -> None:
    """On c680376 the demo profiled all 625 items a pair whatever the speed: issue 35 measured
    502-597 s a pair there, 25 minutes in before its third pair."""
    sizing = pick_size(AVX2_SMOKE, 140.0, shipped_work)
    assert sizing is not None
    assert sizing.fits
    assert sizing.size.name == "medium"
    assert 140.0 + sizing.estimate.total_s + PLANES_S <= TARGET_S
    full = pick_size(AVX2_SMOKE, 140.0, shipped_work, target_s=10_000.0)
    assert full is not None
    assert full.size == SIZES[0]
    assert 140.0 + full.estimate.total_s > 1.5 * TARGET_S  # what the unsized demo would take
    assert "size medium (fits 10 min): 250 eval items a pair" in sizing.line(2)
    assert "(2 pairs)" in sizing.line(2)


def test_a_machine_too_slow_for_any_size_gets_the_smallest_and_is_told() -> None:
    sizing = pick_size([1.0, 1.0], 140.0, shipped_work)
    assert sizing is not None
    assert sizing.size == SIZES[-1]
    assert not sizing.fits
    assert "the smallest size; it does not fit 10 min" in sizing.line(2)
    assert pick_size([0.0], 10.0, shipped_work) is None  # nothing measured: no guess


def test_the_users_request_count_replaces_the_sizes_own() -> None:
    sized = pick_size(AVX512_SMOKE, 110.0, shipped_work)
    asked = pick_size(AVX512_SMOKE, 110.0, shipped_work, replay_requests=120)
    assert sized is not None
    assert asked is not None
    assert asked.estimate.replay_s == pytest.approx(2 * sized.estimate.replay_s)
    assert parse_args(["real"]).requests is None  # sized unless asked
    assert parse_args(["real", "--requests", "7"]).requests == 7
    assert parse_args(["sim"]).requests == 400


def test_every_size_keeps_enough_items_a_category_for_a_bound_both_sources_included() -> None:
    lines = eval_lines(REAL_SWEEP.evalsets)
    for size in SIZES[1:]:
        kept = select_items(lines, size.items_per_category)
        counts = {c: sum(1 for k in kept if k.category == c) for c in {k.category for k in kept}}
        assert counts == dict.fromkeys(counts, size.items_per_category)
        assert size.items_per_category is not None
        assert size.items_per_category >= 20  # the profiler's minimum for a bound
        ids = {k.text.split('"id": "')[1].split('"')[0] for k in kept}
        generated = {i for i in ids if "-g" in i}
        assert 0 < len(generated) < len(ids), "one source of items dropped"
    assert select_items(lines, None) == lines


def test_select_items_spreads_over_a_category_and_keeps_the_first_seen_order() -> None:
    lines = [EvalLine("b", 1, f"b{i}") for i in range(10)] + [EvalLine("a", 2, "a0")]
    kept = select_items(lines, 5)
    assert [k.text for k in kept] == ["b0", "b2", "b4", "b6", "b8", "a0"]


def test_the_smaller_profiles_price_in_the_floors_is_the_bound_gap() -> None:
    for n, gap in CP90_GAP.items():
        right = round(0.4 * n)
        assert right / n - lower_bound(right, n, 0.9) == pytest.approx(gap, abs=0.0005)
    assert CP90_GAP[30] > 2 * CP90_GAP[125] * 0.99


def test_a_sized_sweep_writes_eval_sets_the_profiler_reads(tmp_path: Path) -> None:
    lines = eval_lines(REAL_SWEEP.evalsets)
    small = SIZES[-1]
    sweep = sized_sweep(REAL_SWEEP, lines, small, tmp_path / "evalsets")
    assert sweep.requests_per_level == small.requests_per_level
    items, _, _ = load_eval_sets(sweep.evalsets)
    assert len(items) == 5 * 30
    assert len({i.id for i in items}) == 150
    full = sized_sweep(REAL_SWEEP, lines, SIZES[0], tmp_path / "unused")
    assert full.evalsets == REAL_SWEEP.evalsets
    assert not (tmp_path / "unused").exists()


def test_progress_says_how_long_the_rest_takes_at_the_pace_so_far() -> None:
    assert progress_line(1, 3, 80.0) == "  1/3 pairs profiled in 80 s; about 160 s left"
    assert progress_line(3, 3, 250.0) == "  3/3 pairs profiled in 250 s; about 0 s left"
