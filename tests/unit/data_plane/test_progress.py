"""The engine's own pace (`data_plane.progress.pace`): its profiled time for the work at
its load, its observed slowdown, a margin; never our prediction for the request."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from data_plane.decision.compile import compile_table
from data_plane.progress.pace import EnginePace, engine_time_s, engine_tpot_s, output_cap
from data_plane.settings import ProgressConfig
from tests.component.data_plane.fakes import make_table, pair_entry

PAIR = compile_table(make_table([pair_entry("fam", "int4", urls=["http://a"])])).pairs[0]
CONFIG = ProgressConfig(factor=3.0, slack_s=1.0, max_pace_ratio=8.0)
RECOVERY = 0.5  # half the gap to a faster answer closes per answer


def test_engine_time_is_the_profile_at_the_load() -> None:
    # The fake pair: TTFT 50 ms, TPOT 1 ms, no load terms.
    assert engine_time_s(PAIR, 100, 0, 1.0) == pytest.approx(0.05)
    assert engine_time_s(PAIR, 100, 200, 4.0) == pytest.approx(0.05 + 0.2)


@pytest.mark.parametrize(
    ("input_tokens", "max_tokens", "cap"),
    [
        (100, 50, 50),  # the client's max_tokens
        (100, None, 8192 - 100),  # none: what the context leaves, not a typical length
        (8000, 500, 192),  # max_tokens beyond the context: the context
        (9000, None, 0),
    ],
)
def test_output_cap(input_tokens: int, max_tokens: int | None, cap: int) -> None:
    assert output_cap(PAIR, input_tokens, max_tokens) == cap


def test_the_allowance_is_the_pace_times_the_margin() -> None:
    """No slack on the allowance: noise is what the endpoint's stall window is for."""
    pace = EnginePace(CONFIG, RECOVERY)
    assert pace.allowance_s("e", 0.5) == pytest.approx(0.5 * 3)
    assert EnginePace(ProgressConfig(factor=0.0)).allowance_s("e", 0.5) is None


def test_a_slow_answer_loosens_the_limit_at_once_and_fast_ones_bring_it_back() -> None:
    pace = EnginePace(CONFIG, RECOVERY)
    pace.observe("e", took_s=2.0, profile_s=0.5)  # 4x slower than profiled
    assert pace.ratio("e") == pytest.approx(4.0)
    assert pace.allowance_s("e", 0.5) == pytest.approx(0.5 * 4 * 3)
    pace.observe("e", took_s=0.5, profile_s=0.5)  # as profiled: half the gap closes
    assert pace.ratio("e") == pytest.approx(2.5)
    assert pace.ratio("other") == 1.0  # per endpoint


def test_the_observed_slowdown_is_bounded_and_never_below_the_profile() -> None:
    pace = EnginePace(CONFIG, RECOVERY)
    pace.observe("e", took_s=100.0, profile_s=0.1)
    assert pace.ratio("e") == 8.0
    fast = EnginePace(CONFIG, RECOVERY)
    fast.observe("e", took_s=0.01, profile_s=0.1)  # faster than profiled: no tighter limit
    assert fast.ratio("e") == 1.0
    fast.observe("e", took_s=1.0, profile_s=0.0)  # nothing to compare with
    assert fast.ratio("e") == 1.0


def test_the_gap_limit_is_the_time_per_token_times_the_same_slowdown_and_margin() -> None:
    """Silence mid-answer: the profiled time per token at the load (1 ms here), x the
    endpoint's observed slowdown x 3 + 1 s, never under the floor."""
    assert engine_tpot_s(PAIR, 4.0) == pytest.approx(0.001)
    pace = EnginePace(CONFIG.model_copy(update={"gap_floor_s": 0.0}), RECOVERY)
    assert pace.gap_s("e", 0.1) == pytest.approx(0.1 * 3 + 1)
    pace.observe("e", took_s=2.0, profile_s=0.5)  # 4x slower than profiled
    assert pace.gap_s("e", 0.1) == pytest.approx(0.1 * 4 * 3 + 1)
    floored = EnginePace(CONFIG.model_copy(update={"gap_floor_s": 5.0}), RECOVERY)
    assert floored.gap_s("e", 0.1) == 5.0
    assert floored.gap_s("e", 2.0) == pytest.approx(2.0 * 3 + 1)
    assert EnginePace(ProgressConfig(factor=0.0)).gap_s("e", 0.1) is None


def test_retain_forgets_endpoints_that_left_the_table() -> None:
    pace = EnginePace(CONFIG, RECOVERY)
    pace.observe("a", 1.0, 0.5)
    pace.observe("b", 1.0, 0.5)
    pace.retain(["a"])
    assert (pace.ratio("a"), pace.ratio("b")) == (2.0, 1.0)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"factor": -1.0},
        {"slack_s": -0.1},
        {"stall_window_s": -0.1},
        {"max_pace_ratio": 0.5},
        {"gap_floor_s": -1.0},
    ],
)
def test_bad_configs_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValidationError, match="greater than or equal"):
        ProgressConfig(**kwargs)
    with pytest.raises(ValueError, match="recovery"):
        EnginePace(CONFIG, recovery=0.0)
