"""The offline floor-attainment experiment: the bound keeps the router above the true floor
where the point estimate does not, at a price the oracle shows."""

from __future__ import annotations

import pytest

from bench.floors.attainment import main, run
from contracts.policy import Policy


def test_the_bound_attains_floors_the_point_estimate_misses() -> None:
    tallies = run(draws=30, seed=7, policy=Policy())
    point, bound, oracle = (tallies[k] for k in ("point estimate", "confidence bound", "oracle"))
    assert oracle.met == oracle.decisions
    assert bound.met / bound.decisions >= 0.95
    assert point.met / point.decisions < 0.85
    assert bound.usd >= oracle.usd


def test_more_items_cost_less(capsys: pytest.CaptureFixture[str]) -> None:
    few = run(draws=20, seed=3, policy=Policy(), items=100)["confidence bound"].usd
    many = run(draws=20, seed=3, policy=Policy(), items=1600)["confidence bound"].usd
    assert many < few
    assert main(["--draws", "2"]) == 0
    assert "floor attainment" in capsys.readouterr().out
