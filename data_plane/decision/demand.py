"""Spilled demand: the pair a request would have gone to had no endpoint been loaded, when
load sent it to another pair (or, strict, to none).

PURE. The autoscaling signal (docs/METRICS.md, "Autoscaling") counts such a request as
demand for the pair it wanted. Only when an endpoint of a pair before the chosen one in the
table's cost order carries load (or no pair was chosen while some endpoint carries load) is
the decision run again at zero load, with the same ejected endpoints; otherwise no pair was
passed over for load and nothing else is computed.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from data_plane.decision.choose import choose_route
from data_plane.domain import (
    Candidate,
    CompiledPair,
    CompiledTable,
    HealthView,
    NoRoute,
    RouteDecision,
    RouteReason,
    RouteRequest,
)


def _earlier_rows_loaded(
    table: CompiledTable, alias: str, chosen: CompiledPair, load: Mapping[str, float]
) -> bool:
    for row in table.scan_rows.get(alias, ()):
        if row.order == chosen.order:
            return False
        if any(load.get(e, 0.0) > 0.0 for e in row.endpoint_ids):
            return True
    return False


def spilled_from(
    table: CompiledTable,
    req: RouteRequest,
    health: HealthView,
    result: RouteDecision | NoRoute,
    rng: random.Random,
) -> Candidate | None:
    """The zero-load choice when load made `result` pick another pair or none, else None.

    `rng` orders the endpoints of the zero-load decision only (never its pair)."""
    chosen = result.candidates[0].pair if isinstance(result, RouteDecision) else None
    if chosen is None:
        if not any(v > 0.0 for v in health.load.values()):
            return None
    elif not _earlier_rows_loaded(table, req.facts.alias, chosen, health.load):
        return None
    idle = choose_route(table, req, HealthView(health.open_endpoints), rng)
    if not isinstance(idle, RouteDecision) or idle.reason != RouteReason.CHEAPEST_FEASIBLE:
        return None
    wanted = idle.candidates[0]
    if chosen is not None and wanted.pair.pair == chosen.pair:
        return None
    return wanted
