"""Run the scale section (docs/benchmarks.md, "Scale") and collect its figures.

Quick mode measures the corners that carry targets (and the smallest sizes), for seconds
each; the full run measures every size.
"""

from __future__ import annotations

import cProfile
import pstats
import random
from dataclasses import dataclass, field

from bench.common.tables import synthetic_table
from bench.scale.build import BuildResult, time_build
from bench.scale.choose import REQUEST, URLS, ChooseResult, time_choose_route
from bench.scale.exchange_profile import profile_exchange
from bench.scale.fleet import FleetResult, Mode, measure_fleet
from bench.scale.redis_cost import CASES as REDIS_CASES
from bench.scale.redis_cost import Fleet, RedisCost, measure
from bench.scale.upstream_memory import CASES, HostileResult, measure_hostile
from data_plane.decision.choose import choose_route
from data_plane.decision.compile import compile_table
from data_plane.domain import HealthView
from data_plane.sync import in_flight_sharing

FLEETS_FULL = [(n, e) for n in (4, 16, 64) for e in (20, 100, 200)]
FLEETS_QUICK = [(4, 20), (16, 100), (64, 200)]
BUILDS_FULL = [(n, p) for n in (6, 50, 200) for p in (500, 5_000, 30_000)]
BUILDS_QUICK = [(6, 500), (200, 30_000)]
PAIRS = (50, 200, 1_000)


@dataclass
class ScaleResult:
    fleets: list[FleetResult] = field(default_factory=list)
    exchange_profile: list[tuple[str, float]] = field(default_factory=list)  # 64 x 200, CPU
    redis_costs: list[RedisCost] = field(default_factory=list)  # Redis's CPU for sharing
    choose: list[ChooseResult] = field(default_factory=list)
    choose_profile: list[tuple[str, float]] = field(default_factory=list)  # 200 pairs, self time
    builds: list[BuildResult] = field(default_factory=list)
    hostile: list[HostileResult] = field(default_factory=list)


def profile_choose_route(n_pairs: int, calls: int = 2000) -> list[tuple[str, float]]:
    """Where `choose_route`'s time goes: (function, share of self time), top 6."""
    table = compile_table(synthetic_table(n_pairs, URLS))
    endpoints = [e.id for p in table.pairs for e in p.endpoints]
    health = HealthView(
        open_endpoints=frozenset(endpoints[::16]),
        load={e: float(i % 7) for i, e in enumerate(endpoints)},
    )
    rng = random.Random(7)
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(calls):
        choose_route(table, REQUEST, health, rng)
    profile.disable()
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    own = {f"{func[2]} ({func[0].rsplit('/', 1)[-1]}:{func[1]})": v[2] for func, v in stats.items()}
    total = sum(own.values()) or 1.0
    top = sorted(own.items(), key=lambda kv: -kv[1])[:6]
    return [(name, t / total) for name, t in top]


def run_scale(quick: bool) -> ScaleResult:
    result = ScaleResult()
    seconds = 3.0 if quick else 10.0
    modes: tuple[Mode, ...] = ("sharing", "breakers")
    for mode in modes:
        for n, e in FLEETS_QUICK if quick else FLEETS_FULL:
            result.fleets.append(measure_fleet(mode, n, e, seconds))
            print(f"    {mode} {n} x {e}: done", flush=True)
    result.exchange_profile = profile_exchange(64, 200)
    for n, e, shards, groups in REDIS_CASES:
        fleet = Fleet(in_flight_sharing, n, e, groups)
        result.redis_costs.append(measure(fleet, shards, 5.0 if quick else 10.0, "now"))
        print(f"    redis cost {n} x {e} on {shards} shard(s): done", flush=True)
    for n_pairs in PAIRS:
        calls = (200 if n_pairs >= 1000 else 500) if quick else 2000
        result.choose.append(time_choose_route(n_pairs, 9 if quick else 15, calls))
    result.choose_profile = profile_choose_route(200)
    for n_pairs, prompts in BUILDS_QUICK if quick else BUILDS_FULL:
        result.builds.append(time_build(n_pairs, prompts))
        print(f"    build {n_pairs} pairs x {prompts} prompts: done", flush=True)
    result.hostile = [measure_hostile(case) for case in CASES]
    return result
