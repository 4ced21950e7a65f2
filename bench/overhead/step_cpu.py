"""CPU per decision, in process: `DecisionStep.decide` on the overhead section's request and
table (12 pairs, the same body and budget headers), with no HTTP around it, so the figure is
the decision step's own and does not move with the machine's load the way wall-clock
throughput does (issue 33: the machine the benches share is loaded).

Each scenario holds a fixed load at the pairs' endpoints (what the scrape and this replica's
counts would say) and decides `requests` requests, each finished before the next (its tenant
share and slot freed), reporting CPU microseconds per request (`time.process_time`, best of
`rounds`) and, with `--profile`, cProfile's top functions by own time.

    python -m bench.overhead.step_cpu [--requests 20000] [--rounds 3] [--unique] [--profile]

`--unique` gives each request a prompt of its own, their lengths over several of
admission's prompt buckets; every round repeats them in order, so with more requests than
the classifier's memo holds (`category.MEMO_WINDOWS`, 1,024) it misses every time.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from bench.common.tables import synthetic_table
from bench.common.targets import GEARBOX_PAIRS, REQUEST_HEADERS, request_body
from data_plane.decision.compile import compile_table
from data_plane.decision_step import Decidable, DecisionStep, StepParts
from data_plane.domain import CompiledTable, HealthView
from data_plane.resilience.band_arrivals import BandArrivals
from data_plane.resilience.endpoint_load import LoadTracker
from data_plane.resilience.output_length import OutputLengths
from data_plane.resilience.overshoot import Overshoot
from data_plane.resilience.tenant_load import TenantLoad
from data_plane.table_store import TableStore
from data_plane.telemetry.metrics import DataPlaneMetrics

# Each scenario: the requests in flight at every endpoint of the cheapest pair, and at every
# other endpoint. "idle": nothing anywhere (the 1-connection rows); "busy": 50 at the
# cheapest pair, past the standard class's line there but not its sustainable concurrency
# (the 64-connection rows, where most requests meet a loaded first pair); "loaded": 8 at
# every endpoint, below every line.
SCENARIOS: dict[str, tuple[float, float]] = {
    "idle": (0.0, 0.0),
    "loaded": (8.0, 8.0),
    "busy": (50.0, 0.0),
}


class FixedHealth:
    """A `HealthSource` whose view never changes (the scenario's loads, nothing ejected)."""

    def __init__(self, view: HealthView) -> None:
        self._view = view

    def view(self) -> HealthView:
        return self._view

    def set_ladder(self, state: frozenset[tuple[str, str]]) -> None:
        pass

    def retry_after_s(self) -> float:
        return 1.0


@dataclass(frozen=True, slots=True)
class StepCost:
    scenario: str
    unique: bool  # each request's prompt its own
    following: bool  # the chain's next candidate read too
    requests: int
    cpu_us: float  # CPU microseconds per request, best round
    pair: str  # the pair the last request was decided on


def _table() -> CompiledTable:
    urls = [[f"http://127.0.0.1:{9000 + i}"] for i in range(GEARBOX_PAIRS)]
    return compile_table(synthetic_table(GEARBOX_PAIRS, urls))


def _health(table: CompiledTable, scenario: str) -> HealthView:
    first, rest = SCENARIOS[scenario]
    cheapest = table.pairs[0].pair
    load = {e.id: (first if p.pair == cheapest else rest) for p in table.pairs for e in p.endpoints}
    return HealthView(load=load)


def _step(table: CompiledTable, scenario: str) -> DecisionStep:
    store = TableStore()
    store.swap(table)
    clock = time.monotonic
    parts = StepParts(
        store,
        FixedHealth(_health(table, scenario)),
        DataPlaneMetrics("bench", "bench"),
        random.Random(7),
        tenant_load=TenantLoad(clock),
        overshoot=Overshoot(clock),
        slots=LoadTracker(),
        outputs=OutputLengths(),
        arrivals=BandArrivals(clock),
    )
    return DecisionStep(parts)


def _bodies(requests: int, unique: bool) -> list[bytes]:
    """The overhead section's body `requests` times, or with `unique` each with a prompt of
    its own (a number and 0-399 more characters), so the classifier's memo never hits and
    the prompt lengths spread over several buckets (`decision.headroom`)."""
    if not unique:
        return [request_body("auto", stream=False)] * requests
    base = json.loads(request_body("auto", stream=False))
    bodies = []
    for i in range(requests):
        messages = [dict(m) for m in base["messages"]]
        messages[-1]["content"] += f" Case {i}." + " Be brief." * (i % 40)
        bodies.append(json.dumps({**base, "messages": messages}).encode())
    return bodies


def _driver(
    step: DecisionStep, requests: int, unique: bool = False, following: bool = False
) -> Callable[[], str]:
    bodies = _bodies(requests, unique)
    headers = dict(REQUEST_HEADERS)

    def run() -> str:
        pair = ""
        for raw in bodies:
            decided = Decidable()  # what a door's Request is to the step
            step.decide(decided, raw, "chat", headers)
            chain = iter(decided.decision.candidates)  # read in order, as the proxy reads it
            pair = next(chain).pair.pair
            if following:
                next(chain, None)
            step.finished(decided)
        return pair

    return run


def measure(
    scenario: str, requests: int, rounds: int, unique: bool = False, following: bool = False
) -> StepCost:
    """CPU per request of `requests` decisions in `scenario`, best of `rounds` (`unique`:
    each request's prompt its own, `_bodies`; the same prompts again in every round;
    `following`: the chain's next candidate read too)."""
    table = _table()
    run = _driver(_step(table, scenario), requests, unique, following)
    run()  # warm: the first decisions build caches
    best, pair = float("inf"), ""
    for _ in range(rounds):
        started = time.process_time()
        pair = run()
        best = min(best, time.process_time() - started)
    return StepCost(scenario, unique, following, requests, best / requests * 1e6, pair)


def profile(
    scenario: str, requests: int, top: int, unique: bool = False, following: bool = False
) -> str:
    """cProfile's `top` functions by own time over `requests` decisions in `scenario`."""
    run = _driver(_step(_table(), scenario), requests, unique, following)
    run()
    prof = cProfile.Profile()
    prof.runcall(run)
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    return out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), action="append")
    parser.add_argument("--profile", action="store_true", help="print cProfile's top functions")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--unique", action="store_true", help="a prompt of its own per request")
    parser.add_argument("--next", action="store_true", help="read the chain's next candidate too")
    args = parser.parse_args()
    for scenario in args.scenario or list(SCENARIOS):
        cost = measure(scenario, args.requests, args.rounds, args.unique, args.next)
        print(json.dumps({**asdict(cost), "cpu_us": round(cost.cpu_us, 1)}))
        if args.profile:
            print(profile(scenario, args.requests // 4, args.top, args.unique, args.next))


if __name__ == "__main__":
    main()
