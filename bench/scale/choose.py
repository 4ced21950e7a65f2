"""`choose_route` on large tables (50, 200, 1,000 pairs): median microseconds per decision.

The same synthetic tables, health view and request as the decision-speed section
(`bench/overhead/test_decision_speed.py`), timed in batches with the garbage collector off.
"""

from __future__ import annotations

import gc
import random
import statistics
import time
from dataclasses import dataclass

from bench.common.tables import synthetic_table
from data_plane.decision.choose import choose_route
from data_plane.decision.compile import compile_table
from data_plane.domain import Budget, HealthView, RequestFacts, RouteDecision, RouteRequest

URLS = [[f"http://10.0.0.{i}:8000", f"http://10.0.1.{i}:8000"] for i in range(1, 9)]
# A chat prompt of ~2,000 characters, 256 output tokens, a 5 s budget and a 0.8 floor.
REQUEST = RouteRequest(
    facts=RequestFacts(
        alias="auto", category="chat", complexity=0.4, input_chars=2000, max_output_tokens=256
    ),
    budget=Budget(latency_s=5.0, min_accuracy=0.8),
)


@dataclass(frozen=True, slots=True)
class ChooseResult:
    pairs: int
    median_us: float  # per decision, median over the batches
    min_us: float
    batches: int
    calls_per_batch: int


def time_choose_route(n_pairs: int, batches: int = 7, calls: int = 2000) -> ChooseResult:
    table = compile_table(synthetic_table(n_pairs, URLS))
    endpoints = [e.id for p in table.pairs for e in p.endpoints]
    health = HealthView(  # a busy fleet: every endpoint loaded, one in 16 ejected
        open_endpoints=frozenset(endpoints[::16]),
        load={e: float(i % 7) for i, e in enumerate(endpoints)},
    )
    rng = random.Random(7)
    decision = choose_route(table, REQUEST, health, rng)
    if not isinstance(decision, RouteDecision):
        raise RuntimeError(f"choose_route found no route on {n_pairs} pairs: {decision}")
    per_call: list[float] = []
    gc.disable()
    try:
        for _ in range(batches):
            started = time.perf_counter()
            for _ in range(calls):
                choose_route(table, REQUEST, health, rng)
            per_call.append((time.perf_counter() - started) / calls * 1e6)
    finally:
        gc.enable()
    return ChooseResult(n_pairs, statistics.median(per_call), min(per_call), batches, calls)
