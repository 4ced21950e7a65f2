"""Target checks for the quality-first objective on the routing-quality fleet (PURE).

The policy is replayed at 1x, 2x and 3x its nominal rate
(`bench.quality.section.replay_ladder`); its shares should move down the precision ladder
(FP16 -> FP8 -> INT8 -> INT4, by declared format and bits: `data_plane.decision.ladder`) as load
grows, budgets and floors still met.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from bench.common.check import Check
from bench.common.stats import ratio
from bench.quality.results import QUALITY_FIRST, PolicyOutcome, QualityResult
from contracts.names import split_pair
from data_plane.decision.ladder import ladder_ranks

LOADS = (1.0, 2.0, 3.0)
_NAN = math.nan


def mean_rung(o: PolicyOutcome, fleet: Iterable[str] = ()) -> float:
    """Share-weighted rung of the serving pairs (0 = the fleet's most precise, FP16 here),
    rungs ranked over the `fleet`'s pairs and the serving ones."""
    names = {*fleet, *o.share_by_pair}
    ranks = ladder_ranks(split_pair(p)[1] for p in names)
    total = sum(o.share_by_pair.values())
    if total <= 0:
        return _NAN
    return sum(ranks[split_pair(p)[1]] * s for p, s in o.share_by_pair.items()) / total


def _outcomes(q: QualityResult) -> list[PolicyOutcome] | None:
    found = [q.outcome(QUALITY_FIRST, load) for load in LOADS]
    return None if any(o is None for o in found) else [o for o in found if o is not None]


def _missing(name: str, target: str) -> Check:
    return Check("quality", name, _NAN, _NAN, _NAN, "", target, False, "not measured")


def _steps_down(outs: list[PolicyOutcome], fleet: list[str]) -> Check:
    rungs = [mean_rung(o, fleet) for o in outs]
    return Check(
        "quality",
        "quality-first steps down the precision ladder as load grows (mean rung at 3x vs 1x)",
        rungs[-1],
        rungs[0],
        ratio(rungs[-1], rungs[0]),
        "rung",
        "1x < 3x, never falling",
        rungs[0] < rungs[-1] and rungs == sorted(rungs),
        "rung 0 = fp16, 1 = fp8, 2 = int8, 3 = int4; by load: "
        + ", ".join(f"{load:g}x {r:.2f}" for load, r in zip(LOADS, rungs, strict=True)),
    )


def _budgets(outs: list[PolicyOutcome], limit: float) -> Check:
    worst = min(outs, key=lambda o: o.budget_attainment)
    return Check(
        "quality",
        "quality-first budget attainment, lowest of 1x / 2x / 3x",
        worst.budget_attainment * 100,
        outs[0].budget_attainment * 100,
        ratio(worst.budget_attainment, outs[0].budget_attainment),
        "%",
        f">= {limit * 100:g}%",
        worst.budget_attainment >= limit,
        f"lowest at {worst.load:g}x; baseline = 1x",
    )


def _floors(outs: list[PolicyOutcome]) -> Check:
    missed = [f"{o.load:g}x" for o in outs if not o.floors_met]
    return Check(
        "quality",
        "quality-first meets every floor group at 1x, 2x and 3x",
        len(outs) - len(missed),
        len(outs),
        ratio(len(outs) - len(missed), len(outs)),
        "loads",
        "all 3 loads",
        not missed,
        "floor groups not significantly below (one-sided 95%)"
        + (f"; missed at {', '.join(missed)}" if missed else ""),
    )


def ladder_checks(q: QualityResult) -> list[Check]:
    outs = _outcomes(q)
    if outs is None:
        return [
            _missing("quality-first steps down the precision ladder as load grows", "1x < 3x"),
        ]
    fleet = [p.pair for p in q.pairs]
    return [_steps_down(outs, fleet), _budgets(outs, 0.95), _floors(outs)]
