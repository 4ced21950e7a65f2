"""The admission section's stack end to end, shortly (`bench.admission.idle` over
`bench.admission.stack`): the data plane as its own process serving the table built from the
shipped example profiles, simulated engines and a sequential client, one request per cell of
the budget and max_tokens grid. An idle fleet refuses none of them (issue 32, finding 1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.admission.idle import grid, run_idle
from bench.common.machine import Cores

pytestmark = pytest.mark.integration


async def test_the_idle_scenario_serves_every_cell_of_its_grid(tmp_path: Path) -> None:
    result = await run_idle(tmp_path, Cores(""), len(grid()))
    assert {(budget, max_tokens) for budget, max_tokens, _ in result.samples} == set(grid())
    assert [s.status for _, _, s in result.samples] == [200] * len(grid())
    assert all(s.met for _, _, s in result.samples)
