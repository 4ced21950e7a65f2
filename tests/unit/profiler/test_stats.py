"""stats: quantiles, TTFT/TPOT from timed chunks, Wilson intervals, level summaries."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import binomtest

from profiler.stats import (
    RequestTiming,
    TimedStream,
    extract_timing,
    quantile,
    summarize,
    summarize_level,
    wilson_interval,
)


@given(st.lists(st.floats(0, 1e4, allow_nan=False), min_size=1, max_size=200))
def test_quantiles_match_numpy_linear(values: list[float]) -> None:
    ordered = sorted(values)
    for q in (0.0, 0.5, 0.9, 0.95, 0.99, 1.0):
        assert quantile(ordered, q) == pytest.approx(float(np.quantile(values, q)), abs=1e-9)


def test_summarize_reports_count_mean_and_monotone_quantiles() -> None:
    summary = summarize([0.4, 0.1, 0.3, 0.2, 1.0])
    assert summary.n == 5
    assert summary.mean == pytest.approx(0.4)
    assert summary.p50 == pytest.approx(0.3)
    assert summary.p90 == pytest.approx(0.76)
    assert summary.p50 <= summary.p90 <= summary.p95 <= summary.p99 <= 1.0


def test_summarize_single_value_and_empty() -> None:
    one = summarize([0.25])
    assert (one.n, one.p50, one.p99) == (1, 0.25, 0.25)
    with pytest.raises(ValueError, match="empty"):
        summarize([])


def test_ttft_and_tpot_from_timed_chunks() -> None:
    # sent at t=10.0; first token at 10.2, then a token every 50 ms; stream ends at 10.4
    stream = TimedStream(
        started_s=10.0,
        token_times_s=(10.2, 10.25, 10.3, 10.35, 10.4),
        finished_s=10.4,
        prompt_chars=400,
        prompt_tokens=100,
        completion_tokens=5,
    )
    timing = extract_timing(stream)
    assert timing.ttft_s == pytest.approx(0.2)
    assert timing.e2e_s == pytest.approx(0.4)
    assert timing.tpot_s == pytest.approx(0.05)  # (0.4 - 0.2) / (5 - 1)
    assert timing.output_tokens == 5
    assert timing.prompt_tokens == 100


def test_tokens_come_from_usage_when_chunks_carry_several() -> None:
    # 3 chunks but usage says 9 tokens (the engine batched tokens into chunks)
    stream = TimedStream(0.0, (0.1, 0.5, 0.9), 0.9, completion_tokens=9)
    timing = extract_timing(stream)
    assert timing.output_tokens == 9
    assert timing.tpot_s == pytest.approx(0.1)  # (0.9 - 0.1) / 8


def test_tokens_fall_back_to_chunk_count_without_usage() -> None:
    timing = extract_timing(TimedStream(0.0, (0.1, 0.2, 0.3), 0.3))
    assert timing.output_tokens == 3
    assert timing.tpot_s == pytest.approx(0.1)


def test_single_token_has_no_tpot_and_empty_stream_is_rejected() -> None:
    assert extract_timing(TimedStream(0.0, (0.3,), 0.31)).tpot_s is None
    with pytest.raises(ValueError, match="no generated text"):
        extract_timing(TimedStream(0.0, (), 0.5))


@pytest.mark.parametrize(
    ("successes", "n", "low", "high"),
    [
        (0, 10, 0.0, 0.27753),
        (5, 10, 0.23659, 0.76341),
        (10, 10, 0.72247, 1.0),
        (81, 100, 0.72221, 0.87485),
    ],
)
def test_wilson_interval_known_values(successes: int, n: int, low: float, high: float) -> None:
    got = wilson_interval(successes, n)
    assert got == pytest.approx((low, high), abs=1e-4)


@given(st.integers(1, 300).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_wilson_interval_matches_scipy(case: tuple[int, int]) -> None:
    successes, n = case
    ci = binomtest(successes, n).proportion_ci(confidence_level=0.95, method="wilson")
    assert wilson_interval(successes, n) == pytest.approx((ci.low, ci.high), abs=1e-9)


@given(st.integers(1, 500).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_wilson_interval_brackets_the_proportion(case: tuple[int, int]) -> None:
    successes, n = case
    low, high = wilson_interval(successes, n)
    assert 0.0 <= low <= successes / n <= high <= 1.0


def test_wilson_rejects_impossible_counts() -> None:
    with pytest.raises(ValueError, match="3/2"):
        wilson_interval(3, 2)
    with pytest.raises(ValueError, match="n >= 1"):
        wilson_interval(0, 0)


def _timing(start: float, ttft: float, e2e: float, tokens: int, **kw: int) -> RequestTiming:
    tpot = (e2e - ttft) / (tokens - 1) if tokens > 1 else None
    return RequestTiming(ttft, e2e, tokens, tpot, start, start + e2e, **kw)


def test_level_summary_throughput_over_the_measured_window() -> None:
    timings = [_timing(0.0, 0.1, 1.0, 11), _timing(0.5, 0.1, 1.5, 11), _timing(1.0, 0.2, 1.0, 21)]
    sample = summarize_level(timings, errors=2, concurrency=2, input_tokens=64)
    assert sample is not None
    assert sample.requests == 3
    assert sample.errors == 2
    assert sample.duration_s == pytest.approx(2.0)  # first start 0.0 .. last finish 2.0
    assert sample.output_tokens_per_s == pytest.approx(43 / 2.0)
    assert sample.requests_per_s == pytest.approx(1.5)
    assert sample.output_tokens == 14  # mean of 11, 11, 21 rounded
    assert sample.input_tokens == 64  # no usage: the target is kept
    assert sample.tpot_s.n == 3
    assert sample.ttft_s.p50 == pytest.approx(0.1)


def test_level_summary_uses_measured_prompt_tokens() -> None:
    timings = [
        _timing(0.0, 0.1, 1.0, 5, prompt_tokens=120),
        _timing(0, 0.1, 1, 5, prompt_tokens=130),
    ]
    sample = summarize_level(timings, 0, concurrency=1, input_tokens=128)
    assert sample is not None
    assert sample.input_tokens == 125


def test_level_summary_open_loop_concurrency_is_littles_law() -> None:
    # 10 requests over 5 s (2 rps), each 1.5 s long -> about 3 in flight
    timings = [_timing(i * 0.35, 0.1, 1.5, 4) for i in range(10)]
    sample = summarize_level(timings, 0, concurrency=1, input_tokens=8, open_loop_rate_rps=2.0)
    assert sample is not None
    window = 9 * 0.35 + 1.5
    assert sample.concurrency == round(10 / window * 1.5)
    assert sample.open_loop_rate_rps == 2.0


def test_level_summary_without_successes_is_none() -> None:
    assert summarize_level([], errors=5, concurrency=4, input_tokens=8) is None
