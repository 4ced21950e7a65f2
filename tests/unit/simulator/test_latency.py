"""The latency model: TTFT grows with prompt length, TPOT with concurrency; jitter is bounded."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.latency import LatencyModel

MODEL = LatencyModel(
    ttft_base_s=0.02,
    ttft_per_input_token_s=0.001,
    tpot_base_s=0.01,
    tpot_per_running_s=0.002,
    jitter_ratio=0.0,
)


def test_ttft_grows_linearly_with_prompt_tokens() -> None:
    assert MODEL.ttft_s(0) == pytest.approx(0.02)
    assert MODEL.ttft_s(100) == pytest.approx(0.12)
    assert MODEL.ttft_s(1000) > MODEL.ttft_s(100)


def test_tpot_grows_with_running_requests() -> None:
    assert MODEL.tpot_s(1) == pytest.approx(0.01)
    assert MODEL.tpot_s(0) == pytest.approx(0.01)
    assert MODEL.tpot_s(8) == pytest.approx(0.01 + 7 * 0.002)


@given(st.floats(min_value=0.0, max_value=0.999999), st.integers(0, 10_000))
def test_jitter_stays_within_the_ratio(draw: float, tokens: int) -> None:
    jittered = LatencyModel(0.02, 0.001, 0.01, 0.002, jitter_ratio=0.25)
    plain = MODEL.ttft_s(tokens)
    assert 0.75 * plain - 1e-12 <= jittered.ttft_s(tokens, draw) <= 1.25 * plain + 1e-12
    assert jittered.tpot_s(3, 0.5) == pytest.approx(MODEL.tpot_s(3))
