"""Lack of progress per endpoint over time (`data_plane.progress.stall.StallWatch`): an
endpoint stalls only when it sent no byte on ANY attempt for the window while some attempt at
it was overdue by the engine's own pace; a client that ends attempts early adds nothing."""

from __future__ import annotations

import pytest

from data_plane.progress.stall import StallWatch

W = 2.0  # the window's floor


def test_a_silent_endpoint_stalls_after_the_allowance_and_the_window() -> None:
    watch = StallWatch(W)
    assert watch.begin("e", "a", now=0.0, allowance_s=0.3) == pytest.approx(0.3 + W)
    assert watch.stalled(2.2) == []  # overdue since 0.3: 1.9 s of silence
    assert watch.silence_s("e", 2.2) == pytest.approx(1.9)
    assert watch.stalled(2.3) == [("e", "a")]
    watch.end("e", "a", 2.3)  # ended by the stall: nothing left to end
    assert watch.next_check(2.3) is None


def test_a_byte_on_any_attempt_resets_the_silence() -> None:
    """A slow attempt at an endpoint still sending bytes elsewhere is a latency fact."""
    watch = StallWatch(W)
    watch.begin("e", "slow", now=0.0, allowance_s=0.3)
    for t in (1.0, 2.0, 3.0, 4.0):  # another attempt's chunks
        watch.progress("e", t)
        assert watch.stalled(t + 0.5) == []
    assert watch.silence_s("e", 5.0) == pytest.approx(1.0)
    assert watch.stalled(6.0) == [("e", "slow")]  # then nothing for the window


def test_silence_counts_only_while_an_attempt_is_overdue() -> None:
    """A client whose budget ends each attempt before the engine's allowance adds nothing,
    however many it sends: a tiny budget cannot stall a healthy engine."""
    watch = StallWatch(W)
    for i in range(1000):
        t = i * 0.1
        watch.begin("e", i, now=t, allowance_s=0.3)
        watch.end("e", i, t + 0.05)  # the client's 50 ms limit
    assert watch.silence_s("e", 100.0) == 0.0
    assert watch.stalled(100.0) == []


def test_silence_adds_up_across_attempts_that_each_end_before_the_window() -> None:
    """A hung engine behind clients whose deadlines (1 s) end each attempt before the window:
    0.7 s overdue each, so the third attempt ends in a stall."""
    watch = StallWatch(W)
    for i in range(2):
        watch.begin("e", i, now=float(i), allowance_s=0.3)
        watch.end("e", i, i + 1.0)
    assert watch.silence_s("e", 2.0) == pytest.approx(1.4)
    watch.begin("e", 2, now=2.0, allowance_s=0.3)
    assert watch.next_check(2.0) == pytest.approx(2.3 + 0.6)
    assert watch.stalled(2.89) == []
    assert watch.stalled(2.9) == [("e", 2)]


def test_a_silence_counts_once_per_window_however_many_attempts_wait() -> None:
    """Five attempts overdue at once at a silent endpoint are one observation: one stall per
    window of silence, and the breaker is told once (not five times)."""
    watch = StallWatch(W)
    for i in range(5):
        watch.begin("e", i, now=0.0, allowance_s=0.3)
    assert {w for _, w in watch.stalled(2.3)} == {0, 1, 2, 3, 4}
    assert watch.take_stalls() == [("e", False)]
    assert watch.take_stalls() == []


def test_later_attempts_end_at_the_next_window_and_a_byte_starts_again() -> None:
    """Once stalled, a later attempt is ended at the next window of silence (a new
    observation), not as soon as it is overdue; a byte ends the episode."""
    watch = StallWatch(W)
    watch.begin("e", "a", now=0.0, allowance_s=0.3)
    assert watch.stalled(2.3) == [("e", "a")]
    watch.take_stalls()
    watch.begin("e", "b", now=5.0, allowance_s=0.3)
    assert watch.next_check(5.0) == pytest.approx(5.3 + W)
    assert watch.stalled(5.3) == []
    assert watch.stalled(7.3) == [("e", "b")]
    assert watch.take_stalls() == [("e", False)]
    watch.progress("e", 8.0)  # it answered someone: a new silence starts
    watch.begin("e", "c", now=8.0, allowance_s=0.3)
    assert watch.next_check(8.3) == pytest.approx(8.3 + W)
    assert watch.stalled(8.3 + W - 0.01) == []
    assert watch.stalled(8.3 + W) == [("e", "c")]
    assert watch.take_stalls() == [("e", False)]


def test_a_silence_of_open_windows_is_a_hang() -> None:
    """The third window of one silence says hung (open the breaker at once); attempts with
    nowhere else to go are not ended by the stalls before it, only by the hang (waiting on a
    hung engine only holds the client until its deadline)."""
    watch = StallWatch(W, open_windows=3)
    watch.begin("e", "only", now=0.0, allowance_s=0.3, movable=False)
    stalls = []
    for t, ended in ((2.3, []), (4.3, []), (6.3, [("e", "only")])):
        assert watch.next_check(t - 0.01) == pytest.approx(t)
        assert watch.stalled(t) == ended
        stalls += watch.take_stalls()
    assert stalls == [("e", False), ("e", False), ("e", True)]
    assert watch.next_check(6.3) is None  # nothing waits any more
    with pytest.raises(ValueError, match="open_windows"):
        StallWatch(W, open_windows=0)


def test_the_window_is_the_longest_overdue_allowance_when_longer_than_the_floor() -> None:
    """A uniformly slower engine owes long work: it gets as long again as the work's own
    allowance before it is judged, so 2 x factor x its profile before its pace is known."""
    watch = StallWatch(W)
    watch.begin("e", "long", now=0.0, allowance_s=6.0, first_token_s=1.0)
    assert watch.window_s("e", 0.5) == W  # not overdue yet; its first token's share < W
    assert watch.window_s("e", 6.0) == 6.0
    assert watch.stalled(11.9) == []
    assert watch.stalled(12.0) == [("e", "long")]


def test_a_neighbour_s_prefill_widens_the_window_before_it_is_overdue() -> None:
    """Issue 36: a streamed prompt of 31.5k tokens owes a 5.5 s prefill (allowance x3 =
    16.5 s) during which an engine that prefills in one step sends no byte to anyone. An
    ordinary attempt beside it is overdue at 0.85 s; on 95376ca W was the floor, so the
    neighbour's silence stalled the endpoint at 2.85 s, 4.85 s and hung it at 6.85 s, before
    the prefill's own allowance. Now W is the prefill's allowance: no stall before the
    prefill's first byte at 5.5 s, which starts the silence over."""
    watch = StallWatch(W, open_windows=3)
    watch.begin("e", "heavy", now=0.0, allowance_s=16.5)
    watch.begin("e", "ordinary", now=0.5, allowance_s=0.35, movable=False)
    assert watch.window_s("e", 1.0) == 16.5
    for t in (2.85, 4.85, 5.4):
        assert watch.stalled(t) == []
    assert watch.take_stalls() == []
    watch.end("e", "heavy", 5.5)
    watch.progress("e", 5.5)
    assert watch.silence_s("e", 5.5) == 0.0
    # A truly hung engine is still caught: the silence past the window of the work owed.
    assert watch.stalled(5.5 + W) == []  # the heavy one's window left with it: W again
    assert watch.stalled(5.5 + 3 * W) == [("e", "ordinary")]
    assert watch.take_stalls()[-1] == ("e", True)


def test_only_overdue_attempts_are_ended() -> None:
    watch = StallWatch(W)
    watch.begin("e", "old", now=0.0, allowance_s=0.3)
    watch.begin("e", "new", now=2.0, allowance_s=0.5)
    assert watch.stalled(2.3) == [("e", "old")]
    assert watch.stalled(4.4) == []  # silent again only since 2.5, when "new" was overdue
    assert watch.stalled(4.5) == [("e", "new")]  # the next window of the same silence


def test_endpoints_are_judged_apart() -> None:
    watch = StallWatch(W)
    watch.begin("hung", "a", now=0.0, allowance_s=0.1)
    watch.begin("busy", "b", now=0.0, allowance_s=0.1)
    watch.progress("busy", 1.5)
    assert watch.stalled(2.1) == [("hung", "a")]
    assert watch.next_check(2.1) == pytest.approx(1.5 + W)


def test_retain_keeps_endpoints_attempts_still_wait_on() -> None:
    watch = StallWatch(W)
    watch.begin("gone", "a", now=0.0, allowance_s=0.1)
    watch.begin("idle", "b", now=0.0, allowance_s=0.1)
    watch.end("idle", "b", 0.05)
    watch.retain([])
    assert watch.stalled(3.0) == [("gone", "a")]
    assert watch.window_s("idle", 3.0) == W  # forgotten: a fresh endpoint
    with pytest.raises(ValueError, match="window_s"):
        StallWatch(-1.0)
