"""bench/admission/misses.py: why a critical request of the burst missed its budget, against
the simulator's truth, and the exact interval of an attainment."""

from __future__ import annotations

import math

import pytest

from bench.admission import burst as b
from bench.admission.misses import CAUSES, Path, cause, causes, clopper_pearson

B = b.BUDGET_MS / 1000
FIT = b.fit()


def way(
    total: float,
    to_engine: float | None,
    held: int,
    late: float = 0.0,
    status: int = 200,
    router: tuple[float, float] = (0.0, 0.0),
) -> Path:
    """`router`: (its wait in the queue, the router's runnable time while it was there)."""
    queued, runnable = router
    return Path(
        status, total, B, to_engine, held, late, queued_s=queued, router_runnable_s=runnable
    )


def why(path: Path) -> str:
    return cause(path, FIT, b.engine_latency_s)


def test_the_burst_engines_fit_eight_in_budget_with_ten_ms_to_spare() -> None:
    assert FIT == 8
    assert b.engine_latency_s(FIT) == pytest.approx(0.39)


def test_each_miss_gets_the_cause_its_way_to_the_engine_shows() -> None:
    assert why(way(0.45, 0.002, held=8)) == "full engine"  # 9 with it: past the budget
    # 7 held: 8 with it, 0.39 s of engine time leaves 10 ms before it
    # 40 ms in the router, 30 of them in its queue, 5 runnable: its queue
    assert why(way(0.43, 0.040, held=7, router=(0.030, 0.005))) == "router queue"
    # ...not queued, the router waiting 35 ms for a CPU: its CPU
    assert why(way(0.43, 0.040, held=7, router=(0.0, 0.035))) == "router CPU"
    assert why(way(0.43, 0.040, held=7, late=0.030)) == "sent late"
    assert why(way(0.42, 0.005, held=7)) == "engine late"
    assert why(way(0.45, 0.120, held=3)) == "engine late"  # 0.27 s truth leaves 130 ms
    assert why(way(0.43, 0.140, held=3, router=(0.120, 0.010))) == "router queue"
    assert why(way(0.43, 0.140, held=3, router=(0.010, 0.120))) == "router CPU"
    assert why(way(0.10, None, held=0, status=429)) == "refused"
    assert why(way(60.0, None, held=0, status=0)) == "no answer"
    assert why(way(0.01, None, held=0, status=503)) == "not traced"


def test_only_misses_are_counted_and_every_cause_is_listed() -> None:
    paths = [way(0.39, 0.001, held=7), way(0.45, 0.002, held=8), way(0.42, 0.005, held=7)]
    counts = causes(paths, FIT, b.engine_latency_s)
    assert list(counts) == list(CAUSES)
    assert counts["full engine"] == 1
    assert counts["engine late"] == 1
    assert sum(counts.values()) == 2


def test_the_interval_is_clopper_pearsons() -> None:
    """Known values: 600 of 600 gives a lower bound of 1 - 0.025^(1/600); 0 of n an upper
    bound of 1 - 0.025^(1/n); 128 of 130 sits inside its interval; none sent: NaN."""
    low, high = clopper_pearson(600, 600)
    assert low == pytest.approx(0.025 ** (1 / 600))
    assert high == 1.0
    assert low > 0.99  # 600 met of 600 shows >= 99%
    low, high = clopper_pearson(0, 130)
    assert low == 0.0
    assert high == pytest.approx(1 - 0.025 ** (1 / 130))
    low, high = clopper_pearson(128, 130)
    assert low < 128 / 130 < high
    assert low < 0.99  # one run's 130 cannot show 99%
    assert all(math.isnan(x) for x in clopper_pearson(0, 0))
