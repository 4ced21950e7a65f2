"""Demand per pair for autoscalers: what the router sends to a pair and what it would send if
the pair had room (docs/METRICS.md, "Autoscaling").

A request that spilled (`decision.demand.spilled_from`) counts as in flight at the pair it
wanted for as long as it would have taken there (its predicted latency at zero load): Little's
law applied to the traffic the pair did not get. Demand = requests in flight at the pair's
endpoints + spilled requests still "in flight" there; one replica sustains the profile's
highest measured concurrency, so desired replicas = ceil(demand / that).
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable, Iterator

from data_plane.decision.demand import spilled_from
from data_plane.domain import CompiledTable, HealthView, NoRoute, RouteDecision, RouteRequest
from data_plane.telemetry.metrics import PairDemand


class SpilledDemand:
    """Spilled requests per wanted pair, each held until its would-be completion."""

    __slots__ = ("_clock", "_due", "_on_spill", "_rng")

    def __init__(
        self, clock: Callable[[], float], on_spill: Callable[[str], None] | None = None
    ) -> None:
        self._clock = clock
        self._on_spill = on_spill
        self._due: dict[str, list[float]] = {}
        self._rng = random.Random(0)  # orders zero-load endpoints only, never the pair

    def observe(
        self,
        table: CompiledTable,
        req: RouteRequest,
        health: HealthView,
        result: RouteDecision | NoRoute,
    ) -> str | None:
        """Count `result` as demand for another pair when load made it spill; returns that
        pair's name, or None."""
        wanted = spilled_from(table, req, health, result, self._rng)
        if wanted is None:
            return None
        pair = wanted.pair.pair
        heapq.heappush(self._due.setdefault(pair, []), self._clock() + wanted.predicted_latency_s)
        if self._on_spill is not None:
            self._on_spill(pair)
        return pair

    def in_flight(self, pair: str) -> int:
        """Spilled requests that would still be running at `pair` now."""
        due = self._due.get(pair)
        if not due:
            return 0
        now = self._clock()
        while due and due[0] <= now:
            heapq.heappop(due)
        return len(due)


def pair_demand(
    table: CompiledTable | None,
    in_flight: Callable[[str], int],
    spilled: SpilledDemand,
) -> Iterator[PairDemand]:
    """Each pair's demand now: `in_flight(endpoint_id)` summed over its endpoints, plus its
    spilled requests; nothing before a table is loaded."""
    if table is None:
        return
    for pair in table.pairs:
        sent = sum(in_flight(e.id) for e in pair.endpoints)
        demand = float(sent + spilled.in_flight(pair.pair))
        per_replica = pair.max_profiled_load
        yield PairDemand(
            pair=pair.pair,
            demand=demand,
            sustainable=float(per_replica),
            desired_replicas=float(math.ceil(demand / per_replica)),
            utilisation=demand / (per_replica * max(1, len(pair.endpoints))),
        )
