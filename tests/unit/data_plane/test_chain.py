"""chain.py: the lazy chain and rejection list behave like tuples and build items once."""

from __future__ import annotations

import pytest

from data_plane.decision.chain import CandidateChain, FeasibleRow, RejectionList, candidate_of
from data_plane.domain import Rejected, Rejection
from tests.unit.data_plane.tables import fleet

_T = fleet()


def _row(i: int, cost: float) -> FeasibleRow:
    pair = _T.pairs[i]
    return (cost, 1.0 + i, i, pair, pair.endpoints, 10 * i, 0.1 * i, 1.0)


HEAD = _row(0, 1e-6)
ROWS = [HEAD, _row(1, 2e-6), _row(2, 3e-6)]


class Leading:
    """A chain's `leading`: its first n rows, recording each n asked for."""

    def __init__(self, rows: list[FeasibleRow]) -> None:
        self.rows = rows
        self.asked: list[int] = []

    def __call__(self, n: int) -> list[FeasibleRow]:
        self.asked.append(n)
        return self.rows[:n]


def test_candidate_of_maps_every_figure() -> None:
    c = candidate_of(ROWS[1], 64)
    assert c.pair is _T.pairs[1]
    assert c.endpoints == _T.pairs[1].endpoints
    assert (c.input_tokens, c.output_tokens) == (10, 64)
    assert (c.predicted_ttft_s, c.predicted_latency_s) == (0.1, 2.0)
    assert (c.estimated_cost_usd, c.load) == (2e-6, 1.0)


def test_the_head_needs_no_other_row() -> None:
    leading = Leading(ROWS)
    chain = CandidateChain([HEAD], 64, leading)
    first = chain[0]
    assert first.pair is _T.pairs[0]
    assert next(iter(chain)) is first
    assert leading.asked == []
    assert chain[0] is first  # built once, same object on every read


def test_the_next_candidate_asks_for_two_rows_only() -> None:
    """What the proxy reads for every attempt with an allowance: the candidate after the
    first, in order; the chain asks for the first two rows, not for all of them."""
    leading = Leading(ROWS)
    chain = CandidateChain([HEAD], 64, leading)
    ahead = iter(chain)
    next(ahead)
    second = next(ahead)
    assert second.pair is _T.pairs[1]
    assert leading.asked == [2]
    assert chain[1] is second
    assert leading.asked == [2]


def test_reading_further_asks_for_every_row_and_keeps_the_head() -> None:
    leading = Leading(ROWS)
    chain = CandidateChain([HEAD], 64, leading)
    first = chain[0]
    assert len(chain) == 3
    assert [c.pair.pair for c in chain] == [p.pair for p in _T.pairs[:3]]
    assert chain[-1] is chain[2]
    assert chain[1:] == (chain[1], chain[2])
    assert next(iter(chain)) is first
    assert len(leading.asked) == 1  # the whole chain, once: shorter than asked for
    with pytest.raises(IndexError):
        chain[3]
    with pytest.raises(IndexError):
        chain[-4]


def test_iterating_stops_where_the_chain_ends() -> None:
    """Read one row at a time, a chain learns its end from a shorter answer than asked."""
    leading = Leading(ROWS)
    assert [c.pair for c in CandidateChain([HEAD], 64, leading)] == list(_T.pairs[:3])
    assert leading.asked == [2, 3, 4]
    with pytest.raises(IndexError):
        CandidateChain([HEAD], 64, Leading(ROWS))[5]


def test_rows_that_drop_the_head_are_a_bug() -> None:
    chain = CandidateChain([HEAD], 64, Leading(ROWS[1:]))
    with pytest.raises(AssertionError):
        len(chain)


def test_a_chain_starts_with_its_head() -> None:
    with pytest.raises(ValueError, match="head"):
        CandidateChain([], 64)


def test_chains_compare_like_tuples() -> None:
    a = CandidateChain(ROWS, 64)
    b = CandidateChain([HEAD], 64, Leading(ROWS))
    assert a == b
    assert a == tuple(b)
    assert tuple(a) == b
    assert a != CandidateChain(ROWS[:2], 64)
    assert a != [*a]  # lists are not tuples, as for a real tuple
    assert repr(a) == repr(tuple(a))
    with pytest.raises(TypeError):
        hash(a)


def test_rejection_list_is_computed_on_first_read_only() -> None:
    made: list[int] = []
    one = Rejected("a@x", Rejection.TOO_SLOW, "predicted 2.00 s > budget 1.00 s at load 1")

    def explain() -> tuple[Rejected, ...]:
        made.append(1)
        return (one,)

    rejected = RejectionList(explain)
    assert made == []
    assert rejected == (one,)
    assert (len(rejected), rejected[0], rejected[-1:]) == (1, one, (one,))
    assert list(rejected) == [one]
    assert made == [1]
    assert RejectionList(tuple) == ()
    assert not RejectionList(tuple)
