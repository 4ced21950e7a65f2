"""Hang or progress from an engine's own token counters (`data_plane.progress.stillness`),
and when the stall watch reads them and acts on a hang (`StallWatch.probes_due`, `read`)."""

from __future__ import annotations

import pytest

from data_plane.progress.engine_probe import parse_token_counters
from data_plane.progress.stall import StallWatch
from data_plane.progress.stillness import Counters, Unread, Verdict, still_verdict

W = 1.5  # the window's floor
C = Counters(100.0, 40.0)
NO_ANSWER, NO_SERIES = Unread.NO_ANSWER, Unread.NO_SERIES


@pytest.mark.parametrize(
    ("first", "second", "verdict"),
    [
        (C, C, Verdict.HUNG),  # it had work and moved nothing
        (C, Counters(100.0, 41.0), Verdict.PROGRESS),  # one token, for anyone
        (C, Counters(180.0, 40.0), Verdict.PROGRESS),  # a prefill finished
        (C, Counters(0.0, 0.0), Verdict.PROGRESS),  # restarted: a live engine
        (NO_ANSWER, NO_ANSWER, Verdict.HUNG),  # frozen or dead throughout
        (C, NO_ANSWER, Verdict.UNKNOWN),  # once slow to serve /metrics: not yet frozen
        (NO_ANSWER, C, Verdict.UNKNOWN),  # nothing to compare these with
        (C, NO_SERIES, Verdict.UNKNOWN),  # a 404, other series: no evidence
        (NO_SERIES, C, Verdict.UNKNOWN),
        (NO_SERIES, NO_ANSWER, Verdict.UNKNOWN),
        (NO_ANSWER, NO_SERIES, Verdict.UNKNOWN),
    ],
)
def test_the_verdict_of_two_readings(first: object, second: object, verdict: Verdict) -> None:
    assert still_verdict(first, second) is verdict  # type: ignore[arg-type]


PAGE = """# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="mine"} 120.0
vllm:prompt_tokens_total{engine="0",model_name="other"} 5000.0
vllm:prompt_tokens_created{engine="0",model_name="mine"} 1.7e+09
vllm:generation_tokens_total{engine="0",model_name="mine"} 30.0
vllm:generation_tokens_total{engine="0",model_name="other"} 900.0
vllm:num_requests_running{engine="0",model_name="mine"} 2.0
"""


def test_only_the_served_models_counters_are_read() -> None:
    """Another model on the same engine neither hides a hang nor fakes progress."""
    assert parse_token_counters(PAGE, "mine") == Counters(120.0, 30.0)
    assert parse_token_counters(PAGE, None) == Counters(5120.0, 930.0)
    assert parse_token_counters(PAGE, "absent") is None
    assert parse_token_counters("vllm:num_requests_running 1\n", "mine") is None
    unlabelled = "vllm:prompt_tokens_total 7\nvllm:generation_tokens_total 2\n"
    assert parse_token_counters(unlabelled, "mine") == Counters(7.0, 2.0)


def _watch(still_windows: int = 2) -> StallWatch:
    return StallWatch(W, open_windows=3, still_windows=still_windows)


def _probe(watch: StallWatch, now: float) -> int:
    """The one endpoint's read due at `now`: its episode."""
    due = watch.probes_due(now)
    assert [e for e, _ in due] == ["e"], due
    return due[0][1]


def test_still_counters_across_the_span_are_a_hang_long_before_the_windows() -> None:
    """First read when an attempt is overdue, then one each window of waiting: counters still
    across 2 x W end every overdue attempt, the one with nowhere else to go included (the
    breaker opens), at 3.3 s instead of the windows' hang at 0.3 + 3 x 1.5 = 4.8 s; still for
    one window only is not yet the hang. The windows' stalls before it count and move
    attempts as before."""
    watch = _watch()
    assert watch.begin("e", "a", now=0.0, allowance_s=0.3) == pytest.approx(0.3)
    watch.begin("e", "only", now=0.0, allowance_s=0.3, movable=False)
    assert watch.probes_due(0.29) == []
    epoch = _probe(watch, 0.3)
    assert watch.probes_due(0.3) == []  # one read in flight per endpoint
    assert watch.read("e", epoch, 0.32, C) is None  # the baseline
    assert watch.stalled(1.8) == [("e", "a")]  # the first window, as before
    assert watch.take_stalls() == [("e", False)]
    assert watch.probes_due(1.81) == []  # the next read comes a window of waiting on
    assert watch.read("e", _probe(watch, 1.82), 1.82, C) is None  # still for one window only
    assert watch.next_check(1.82) == pytest.approx(3.3)  # the second window
    assert watch.stalled(3.3) == []  # counted; "only" has nowhere else to go
    assert watch.take_stalls() == [("e", False)]
    assert watch.next_check(3.3) == pytest.approx(0.32 + 2 * W)
    assert watch.probes_due(3.31) == []
    epoch = _probe(watch, 3.32)
    assert watch.read("e", epoch, 3.35, C) == ["only"]
    assert watch.next_check(3.35) is None


def test_moving_counters_are_progress_so_the_windows_count_nothing_and_never_hang() -> None:
    """It works, for someone (another client's long answer, another replica's traffic): once
    two readings show it, the windows' stalls count nothing and their hang does not come,
    while attempts with somewhere else to go still move on; a byte starts over (the windows
    count again until the readings show movement again)."""
    watch = _watch()
    watch.begin("e", "only", now=0.0, allowance_s=0.3, movable=False)
    assert watch.read("e", _probe(watch, 0.3), 0.3, C) is None
    assert watch.stalled(1.8) == []  # the first window, before any movement was seen
    assert watch.take_stalls() == [("e", False)]
    moved = Counters(C.prompt_tokens, C.generation_tokens + 8)
    assert watch.read("e", _probe(watch, 3.3), 3.3, moved) is None
    watch.begin("e", "a", now=3.3, allowance_s=0.3)
    assert watch.stalled(4.8) == [("e", "a")]  # the third window: "a" moves on, no hang
    assert watch.take_stalls() == []
    assert watch.stalled(10.0) == []  # "only" keeps waiting for its client's own limit
    assert watch.take_stalls() == []
    watch.progress("e", 10.0)
    watch.begin("e", "b", now=10.0, allowance_s=0.3)
    assert watch.stalled(11.8) == [("e", "b")]
    assert watch.take_stalls() == [("e", False)]


def test_progress_is_known_a_window_in_before_the_windows_hang_at_three() -> None:
    """At three windows of span (the default), the counters are still read each window: the
    movement is known at 1.8 s, before the windows' own hang (0.3 + 3 x 1.5 = 4.8 s) could take
    a working engine for a hung one; still counters need all three windows (4.8 s)."""
    watch = _watch(still_windows=3)
    watch.begin("e", "only", now=0.0, allowance_s=0.3, movable=False)
    assert watch.read("e", _probe(watch, 0.3), 0.3, C) is None
    moved = Counters(C.prompt_tokens, C.generation_tokens + 8)
    assert watch.read("e", _probe(watch, 1.8), 1.8, moved) is None
    for t in (1.8, 3.3, 4.8, 6.3):
        assert watch.stalled(t) == []
        assert watch.take_stalls() == []
    still = _watch(still_windows=3)
    still.begin("e", "only", now=0.0, allowance_s=0.3, movable=False)
    for t in (0.3, 1.8, 3.3):
        assert still.read("e", _probe(still, t), t, C) is None
    assert still.read("e", _probe(still, 4.8), 4.8, C) == ["only"]


def test_no_counters_is_no_evidence() -> None:
    watch = _watch()
    watch.begin("e", "a", now=0.0, allowance_s=0.3)
    for t in (0.3, 3.3, 6.3, 9.3):
        assert watch.read("e", _probe(watch, t), t, NO_SERIES) is None


def test_a_byte_in_between_drops_the_reading_and_starts_over() -> None:
    """A reading whose episode saw a byte compares with nothing: the engine answered."""
    watch = _watch()
    watch.begin("e", "a", now=0.0, allowance_s=0.3)
    assert watch.read("e", _probe(watch, 0.3), 0.3, C) is None
    epoch = _probe(watch, 3.3)
    watch.progress("e", 3.31)  # another attempt's chunk, while the read was in flight
    assert watch.read("e", epoch, 3.4, C) is None
    assert watch.probes_due(4.89) == []  # one read per floor window, however many bytes
    assert watch.read("e", _probe(watch, 4.9), 4.9, C) is None  # a new baseline
    assert watch.read("e", _probe(watch, 7.9), 7.9, C) == ["a"]


def test_only_time_our_attempts_wait_counts_toward_the_span() -> None:
    """An engine without our work may be idle: the 2 s nothing waited do not count, for the
    next read (a window of waiting on) nor for the span."""
    watch = _watch()
    watch.begin("e", "a", now=0.0, allowance_s=0.3)
    assert watch.read("e", _probe(watch, 0.3), 0.3, C) is None
    watch.end("e", "a", 1.0)  # the client left; 0.7 s waited since the reading
    watch.begin("e", "b", now=3.0, allowance_s=0.3, movable=False)
    assert watch.probes_due(3.79) == []
    assert watch.read("e", _probe(watch, 3.8), 3.8, C) is None  # 0.7 + 0.8 s waited: one window
    assert watch.stalled(4.1) == []  # the windows' first stall (0.7 + 0.8 s of silence)
    assert watch.next_check(4.1) == pytest.approx(3.0 + 2 * W - 0.7)
    assert watch.probes_due(5.2) == []
    assert watch.read("e", _probe(watch, 5.3), 5.3, C) == ["b"]


def test_the_span_is_the_longest_allowance_owed_when_longer_than_the_floor() -> None:
    """A long prefill owed (not overdue yet) may move no counter until it is done (vLLM
    counts a prompt at its end): the reads come a whole allowance apart, and the span waits
    for twice it."""
    watch = _watch()
    watch.begin("e", "short", now=0.0, allowance_s=0.3)
    watch.begin("e", "huge prompt", now=0.0, allowance_s=4.0)
    assert watch.read("e", _probe(watch, 0.3), 0.3, C) is None
    assert watch.probes_due(4.29) == []
    assert watch.read("e", _probe(watch, 4.3), 4.3, C) is None
    assert watch.probes_due(8.29) == []
    assert watch.read("e", _probe(watch, 8.3), 8.3, C) == ["short", "huge prompt"]


def test_a_long_non_streamed_answer_owes_only_its_first_token_to_the_span() -> None:
    """An answer bounded by the context limit has a long allowance, but once its prefill is
    done its tokens move a counter each step: only its first token's allowance (0.5 s here)
    may widen the span, so the floor's 2 x 1.5 s applies."""
    watch = _watch()
    watch.begin("e", "stream", now=0.0, allowance_s=0.3)
    watch.begin("e", "essay", now=0.0, allowance_s=600.0, first_token_s=0.5)
    assert watch.read("e", _probe(watch, 0.3), 0.3, C) is None
    assert watch.read("e", _probe(watch, 3.3), 3.3, C) == ["stream"]  # the essay is not overdue


def test_no_reads_without_a_probe_or_before_an_attempt_is_overdue() -> None:
    off = _watch(still_windows=0)
    off.begin("e", "a", now=0.0, allowance_s=0.3)
    assert off.probes_due(10.0) == []
    assert off.next_check(0.0) == pytest.approx(0.3 + W)
    on = _watch()
    on.begin("e", "a", now=0.0, allowance_s=0.3)
    assert on.probes_due(0.2) == []
    on.end("e", "a", 0.25)  # answered within its allowance
    assert on.probes_due(10.0) == []
    with pytest.raises(ValueError, match="still_windows"):
        StallWatch(W, still_windows=-1)
