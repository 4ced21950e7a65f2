"""Evidence where it moves traffic (contracts/evidence.py, docs/accuracy.md): the provable
share of a recent mix, and per undecided (pair, category) the requests and dollars per day
deciding it would move and the items that would take."""

from __future__ import annotations

import pytest

from contracts.accuracy_bound import items_to_decide
from contracts.evidence import PairAccuracy, evidence, merge_mix
from contracts.latency_feedback import MixCell

HOUR_S = 3600.0
# A cheap pair measured 88/100 on chat (bound 0.80: it proves 0.80, not 0.85) and a dear one
# measured 93/100 (bound 0.90: it proves 0.85, not 0.95).
CHEAP = PairAccuracy("s@int8", "chat", 88, 100, 0.80, 0.05, 0.2)
DEAR = PairAccuracy("l@fp8", "chat", 93, 100, 0.90, 0.15, 0.6)


def _cell(floor: float, pair: str, requests: int, proven: int, prices: PairAccuracy) -> MixCell:
    inp, out = 500 * requests, 200 * requests
    return MixCell(
        category="chat",
        floor=floor,
        pair=pair,
        requests=requests,
        proven=proven,
        input_tokens=inp,
        output_tokens=out,
        cost_usd=prices.cost_usd(inp, out),
    )


# In the last hour: 100 chat requests at floor 0.85, all served by the dear pair under the
# guarantee; 50 at floor 0.95, served by the dear pair as best effort (nothing proves 0.95).
MIX = [_cell(0.85, DEAR.pair, 100, 100, DEAR), _cell(0.95, DEAR.pair, 50, 0, DEAR)]


def test_shares_of_the_mix() -> None:
    found = evidence([CHEAP, DEAR], MIX, {"chat": 0.85}, 0.9, 20, HOUR_S)
    assert found.requests == 150
    assert found.provable_share == pytest.approx(100 / 150)  # 0.85: the dear pair proves it
    assert found.decidable_share == 1.0  # 0.95: under the dear pair's upper bound, 0.961
    assert found.proven_share == pytest.approx(100 / 150)


def test_the_cheap_pair_would_move_the_085_requests_and_save_their_price_difference() -> None:
    found = evidence([CHEAP, DEAR], MIX, {"chat": 0.85}, 0.9, 20, HOUR_S)
    cheap = next(r for r in found.rows if r.pair == CHEAP.pair)
    assert cheap.floors == (0.85,)  # 0.95 is above its upper bound, 0.920: decided against
    assert cheap.requests_moved == 100
    assert cheap.share_moved == pytest.approx(100 / 150)
    # 50,000 input and 20,000 output tokens: 0.0195 $ served, 0.0065 $ on the cheap pair,
    # in one hour: 0.013 x 24 a day.
    assert cheap.usd_per_day == pytest.approx(0.013 * 24)
    assert cheap.items_needed == items_to_decide(88, 100, 0.85, 0.9) == 159
    assert cheap.likely_pass  # 0.88 >= 0.85


def test_the_dear_pair_would_prove_its_best_effort_requests_at_no_saving() -> None:
    found = evidence([CHEAP, DEAR], MIX, {"chat": 0.85}, 0.9, 20, HOUR_S)
    dear = next(r for r in found.rows if r.pair == DEAR.pair)
    assert dear.floors == (0.95,)
    assert dear.requests_moved == 50
    assert dear.usd_per_day == pytest.approx(0.0)
    assert not dear.likely_pass  # 0.93 < 0.95: more items most likely decide against it
    assert [r.pair for r in found.rows] == [CHEAP.pair, DEAR.pair]  # dollars first


def test_a_decided_pair_has_no_row_and_an_empty_mix_moves_nothing() -> None:
    decided = PairAccuracy("m@fp16", "chat", 990, 1000, 0.98, 0.1, 0.4)
    assert evidence([decided], MIX, {"chat": 0.85}, 0.9, 20, HOUR_S).rows == ()
    empty = evidence([CHEAP], [], {"chat": 0.85}, 0.9, 20, HOUR_S)
    assert (empty.requests, empty.provable_share) == (0, 0.0)
    (row,) = empty.rows  # still undecided against the policy's floor, moving nothing
    assert (row.floors, row.requests_moved, row.usd_per_day) == ((0.85,), 0, 0.0)


def test_too_few_items_leave_every_floor_open() -> None:
    thin = PairAccuracy("t@int4", "chat", 10, 10, 0.0, 0.01, 0.05)
    found = evidence([thin], MIX, {"chat": 0.85}, 0.9, 20, HOUR_S)
    (row,) = found.rows
    assert row.floors == (0.85, 0.95)
    assert row.items_needed is not None
    assert row.items_needed >= 10


def test_reports_merge_per_category_floor_and_pair() -> None:
    merged = merge_mix([*MIX, *MIX])
    assert [(c.floor, c.requests, c.proven) for c in merged] == [(0.85, 200, 200), (0.95, 100, 0)]
    assert merged[0].cost_usd == pytest.approx(2 * MIX[0].cost_usd)
