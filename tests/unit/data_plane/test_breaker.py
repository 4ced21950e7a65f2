"""breaker.py: the per-endpoint state machine, driven by explicit `now` values."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data_plane.resilience.breaker import BreakerBoard, BreakerState, Transition
from data_plane.settings import BreakerConfig

CFG = BreakerConfig(
    consecutive_failures=3,
    failure_ratio=0.5,
    min_requests=10,
    window_s=10.0,
    cooldown_s=2.0,
    max_cooldown_s=7.0,
    probe_timeout_s=5.0,
)
E = "fam@q#0"


def fail(board: BreakerBoard, n: int, now: float = 0.0) -> list[Transition | None]:
    return [board.record(E, False, now) for _ in range(n)]


def test_unknown_endpoints_are_closed_and_allowed() -> None:
    board = BreakerBoard(CFG)
    assert board.state(E) is BreakerState.CLOSED
    assert board.allow(E, 0.0)
    assert board.open_endpoints(0.0) == frozenset()
    assert board.config is CFG
    assert BreakerBoard().config == BreakerConfig()


def test_consecutive_failures_open() -> None:
    board = BreakerBoard(CFG)
    assert fail(board, 2) == [None, None]
    assert board.record(E, True, 0.0) is None  # a success resets the run
    assert fail(board, 2) == [None, None]
    t = board.record(E, False, 1.0)
    assert t == Transition(E, BreakerState.CLOSED, BreakerState.OPEN, 1.0, "3 consecutive failures")
    assert board.state(E) is BreakerState.OPEN
    assert not board.allow(E, 1.5)
    assert board.open_endpoints(1.5) == {E}


def test_failure_ratio_over_the_window_opens() -> None:
    board = BreakerBoard(CFG)
    transitions = []
    for i in range(10):  # alternate: never 3 in a row, 50% failures
        transitions.append(board.record(E, i % 2 == 0, float(i) * 0.1))
    assert transitions[:-1] == [None] * 9
    last = transitions[-1]
    assert last is not None
    assert last.to_state is BreakerState.OPEN
    assert last.why == "5 of 10 requests failed in 10 s"


def test_ratio_needs_the_minimum_number_of_requests() -> None:
    board = BreakerBoard(CFG)
    for i in range(9):
        assert board.record(E, i % 2 == 0, 0.0) is None
    assert board.state(E) is BreakerState.CLOSED


def test_old_outcomes_slide_out_of_the_window() -> None:
    board = BreakerBoard(CFG)
    for i in range(8):
        board.record(E, i % 2 == 1, 0.0)  # 4 failures in 8 at t=0
    # 20 s later the old bucket is gone: 2 new requests (1 failure) are below min_requests
    assert board.record(E, False, 20.0) is None
    assert board.record(E, True, 20.0) is None
    assert board.state(E) is BreakerState.CLOSED


def test_open_to_half_open_admits_one_probe() -> None:
    board = BreakerBoard(CFG)
    fail(board, 3, now=10.0)
    assert not board.allow(E, 11.9)
    assert board.open_endpoints(11.9) == {E}
    # cooldown elapsed: routable again so that a request can probe it
    assert board.open_endpoints(12.0) == frozenset()
    assert board.allow(E, 12.0)
    assert board.state(E) is BreakerState.HALF_OPEN
    (t,) = board.take_transitions()
    assert (t.from_state, t.to_state, t.why) == (
        BreakerState.OPEN,
        BreakerState.HALF_OPEN,
        "cooldown elapsed",
    )
    assert board.take_transitions() == ()
    # while the probe is out, everyone else sees it as open
    assert not board.allow(E, 12.1)
    assert board.open_endpoints(12.1) == {E}


def test_probe_success_closes_and_resets_the_cooldown() -> None:
    board = BreakerBoard(CFG)
    fail(board, 3, now=0.0)
    assert board.allow(E, 2.0)
    t = board.record(E, True, 2.5)
    assert t is not None
    assert (t.to_state, t.why) == (BreakerState.CLOSED, "probe succeeded")
    assert board.allow(E, 2.6)
    assert board.allow(E, 2.6)  # closed: no probe limit
    # the next opening uses the base cooldown again, and counting starts afresh
    assert fail(board, 2, now=3.0) == [None, None]
    fail(board, 1, now=3.0)
    assert not board.allow(E, 4.9)
    assert board.allow(E, 5.0)


def test_probe_failure_reopens_with_doubling_cooldown_up_to_the_cap() -> None:
    board = BreakerBoard(CFG)
    fail(board, 3, now=0.0)
    now, expected = 0.0, [4.0, 7.0, 7.0]
    now += 2.0
    for cooldown in expected:
        assert board.allow(E, now)
        t = board.record(E, False, now)
        assert t is not None
        assert t.to_state is BreakerState.OPEN
        assert t.why == f"probe failed; next cooldown {cooldown:g} s"
        assert not board.allow(E, now + cooldown - 0.01)
        now += cooldown
    assert board.allow(E, now)


def test_a_probe_never_reported_frees_the_slot_after_the_timeout() -> None:
    board = BreakerBoard(CFG)
    fail(board, 3, now=0.0)
    assert board.allow(E, 2.0)
    assert not board.allow(E, 6.9)
    assert board.open_endpoints(6.9) == {E}
    assert board.open_endpoints(7.0) == frozenset()
    assert board.allow(E, 7.0)  # a second probe
    assert not board.allow(E, 7.1)


def test_a_probe_slot_given_back_is_free_at_once() -> None:
    """`release_probe`: the attempt `allow` admitted was never sent (issue 13, item 2)."""
    board = BreakerBoard(CFG)
    fail(board, 3, now=0.0)
    assert board.allow(E, 2.0)
    assert not board.allow(E, 2.1)
    board.release_probe(E)
    assert board.open_endpoints(2.1) == frozenset()
    assert board.allow(E, 2.1)
    board.release_probe("fam@q#9")  # unknown or closed endpoints: nothing to give back
    board.record(E, True, 2.2)
    board.release_probe(E)
    assert board.state(E) is BreakerState.CLOSED


def test_records_while_open_are_ignored() -> None:
    board = BreakerBoard(CFG)
    fail(board, 3, now=0.0)
    assert board.record(E, True, 0.5) is None
    assert board.record(E, False, 0.5) is None
    assert board.state(E) is BreakerState.OPEN
    assert not board.allow(E, 1.9)


def test_endpoints_are_independent_and_retain_forgets() -> None:
    board = BreakerBoard(CFG)
    fail(board, 3)
    board.record("other#0", True, 0.0)
    assert board.open_endpoints(0.0) == {E}
    assert board.allow("other#0", 0.0)
    board.retain(["other#0"])
    assert board.state(E) is BreakerState.CLOSED
    assert board.state("other#0") is BreakerState.CLOSED


def test_state_levels_match_the_metric() -> None:
    assert [s.level for s in BreakerState] == [0, 1, 2]
    assert [s.value for s in BreakerState] == ["closed", "half_open", "open"]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"consecutive_failures": 0},
        {"min_requests": 0},
        {"failure_ratio": 0.0},
        {"failure_ratio": 1.5},
        {"cooldown_s": 0.0},
        {"cooldown_s": 10.0, "max_cooldown_s": 5.0},
        {"window_s": 0.0},
        {"probe_timeout_s": -1.0},
    ],
)
def test_config_validation(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=r"must|should"):
        BreakerConfig(**kwargs)


def test_window_buckets_validation() -> None:
    with pytest.raises(ValueError, match="must"):
        BreakerBoard(window_buckets=0)


@settings(max_examples=200)
@given(
    st.lists(
        st.tuples(st.sampled_from(["a", "b", "c"]), st.booleans(), st.floats(0.0, 3.0)),
        max_size=120,
    )
)
def test_running_totals_and_open_set_match_a_full_recount(
    steps: list[tuple[str, bool, float]],
) -> None:
    config = BreakerConfig(consecutive_failures=50, min_requests=4, window_s=4.0)
    board = BreakerBoard(config, window_buckets=4)
    now = 0.0
    for endpoint, success, gap in steps:
        now += gap
        if board.allow(endpoint, now):
            board.record(endpoint, success, now)
        board.take_transitions()
        for b in board._breakers.values():
            assert (b.requests, b.failures) == (
                sum(w[1] for w in b.window),
                sum(w[2] for w in b.window),
            )
        probe_s = config.probe_timeout_s
        assert board.open_endpoints(now) == {
            eid
            for eid, b in board._breakers.items()
            if (b.state is BreakerState.OPEN and now < b.opened_at + b.cooldown_s)
            or (b.state is BreakerState.HALF_OPEN and now < b.probe_started + probe_s)
        }


def test_new_endpoints_start_half_open_with_the_probe_slot_free() -> None:
    board = BreakerBoard(BreakerConfig(cooldown_s=5.0))
    board.record("old", True, 1.0)  # has served: left alone
    moved = board.start_half_open(["new", "old"], 2.0)
    assert [(t.endpoint_id, t.to_state) for t in moved] == [("new", BreakerState.HALF_OPEN)]
    assert board.take_transitions() == ()  # returned, not queued twice
    assert board.open_endpoints(2.0) == frozenset()  # routable for its probe
    assert board.allow("new", 2.0) is True  # the probe
    assert board.allow("new", 2.1) is False  # everyone else waits for it
    assert board.open_endpoints(2.1) == frozenset({"new"})
    board.record("new", True, 2.5)
    assert board.state("new") is BreakerState.CLOSED
