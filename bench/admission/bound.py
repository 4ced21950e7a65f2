"""What any router could reach on section 9's fleet and schedule: a token-level simulation of
the two engines under routers that see exact in-flight counts, pay no overhead and never shed
a critical request (`python -m bench.admission.bound`; docs/benchmarks.md, section 9).

Each engine decodes every running request one token per TPOT_S + TPOT_PER_RUNNING_S x (the
others decoding) after TTFT_S, as the simulator does (checked against `engine_latency_s` in
tests/bench/test_admission_bound.py). The routers differ only in whom they shed and where
they place: they bound the section's targets from above, since the data plane's admission
decides with less (predictions, not the engines' progress) and pays its own overhead.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from bench.admission.burst import (
    BURST_TIMES,
    BURSTY_SHARE,
    MAX_TOKENS,
    STEADY_SHARE,
    TPOT_PER_RUNNING_S,
    TPOT_S,
    TTFT_S,
    Arrival,
    capacity_rps,
    engine_latency_s,
    schedule,
)

STEP_S = 0.001
SLOTS = max(n for n in range(1, 65) if engine_latency_s(n) <= 0.4)  # 8: in budget beside 7

# (arrival, in-flight count per engine, during the burst run) -> engine index, or None: shed.
Router = Callable[[Arrival, list[int], bool], int | None]


@dataclass
class _Job:
    arrival: Arrival
    decoding_from_s: float
    tokens_left: float


def simulate(router: Router, arrivals: list[Arrival], burst: bool) -> list[tuple[Arrival, bool]]:
    """Each arrival and whether it was answered within the budget (False when shed)."""
    engines: list[list[_Job]] = [[], []]
    met: list[tuple[Arrival, bool]] = []
    t, i = 0.0, 0
    while i < len(arrivals) or any(engines):
        t += STEP_S
        for jobs in engines:
            decoding = sum(1 for j in jobs if t >= j.decoding_from_s)
            per_token_s = TPOT_S + TPOT_PER_RUNNING_S * (max(decoding, 1) - 1)
            for j in jobs:
                if t >= j.decoding_from_s:
                    j.tokens_left -= STEP_S / per_token_s
            for j in [j for j in jobs if j.tokens_left <= 0]:
                jobs.remove(j)
                met.append((j.arrival, t - j.arrival.at_s <= 0.4 + 1e-9))
        while i < len(arrivals) and arrivals[i].at_s <= t:
            a = arrivals[i]
            i += 1
            target = router(a, [len(e) for e in engines], burst)
            if target is None:
                met.append((a, False))
            else:
                engines[target].append(_Job(a, a.at_s + TTFT_S, float(MAX_TOKENS)))
    return met


def router(shed: Callable[[Arrival], bool], least_loaded: bool, full_sheds: bool) -> Router:
    """Sheds the sheddable arrivals `shed` picks during the burst run; places on the first
    engine with a slot in budget (cheapest first, or the least loaded); when both are full, a
    critical request (and, unless `full_sheds`, any other) goes to the less loaded one."""

    def decide(a: Arrival, loads: list[int], burst: bool) -> int | None:
        if a.priority != "critical" and burst and shed(a):
            return None
        order = sorted(range(2), key=lambda k: loads[k]) if least_loaded else [0, 1]
        room = [k for k in order if loads[k] + 1 <= SLOTS]
        if room:
            return room[0]
        if full_sheds and a.priority != "critical":
            return None
        return 0 if loads[0] <= loads[1] else 1

    return decide


def lined(lines: dict[str, int]) -> Router:
    """Strict class lines per engine: a request of a class goes to the first engine (cheapest
    first) holding fewer than its class's line (`lines`: priority -> requests per engine),
    so the slots above a lower class's line stay free for the classes above it, in and out
    of the burst; when none has room, a critical request goes to the less loaded engine
    and any other is shed. The data plane's shares (standard 0.75, batch 0.5, critical 1.0
    of the 8 that fit) give 6 / 4 / 8: what it does with exact counts and no overhead."""

    def decide(a: Arrival, loads: list[int], burst: bool) -> int | None:
        room = [k for k in range(2) if loads[k] + 1 <= lines[a.priority]]
        if room:
            return room[0]
        if a.priority != "critical":
            return None
        return 0 if loads[0] <= loads[1] else 1

    return decide


def _lines(standard: int, batch: int) -> dict[str, int]:
    return {"critical": SLOTS, "standard": standard, "batch": batch}


BANDS = ("critical", "standard", "batch")  # highest first


def adaptive(lines: dict[str, int], z: float = 0.0, window_s: float = 1.0) -> Router:
    """Class lines that follow the higher bands' observed demand (issue 32): a class's line on
    an engine is min(its static line, SLOTS - reserve), the reserve being the arrivals of the
    bands above it over the last `window_s` x the service time at the line
    (engine_latency_s(SLOTS)) / the engines, plus `z` standard deviations of that count (z = 0:
    the mean alone). The top band is never reserved against. Stateful (it counts arrivals):
    build one per simulation."""
    seen: dict[str, deque[float]] = {band: deque() for band in BANDS}
    service_s = engine_latency_s(SLOTS)

    def decide(a: Arrival, loads: list[int], burst: bool) -> int | None:
        seen[a.priority].append(a.at_s)
        for times in seen.values():
            while times and times[0] < a.at_s - window_s:
                times.popleft()
        rank = BANDS.index(a.priority)
        above = sum(len(seen[band]) for band in BANDS[:rank]) / window_s * service_s / 2
        reserve = above + z * math.sqrt(above)
        line = min(lines[a.priority], SLOTS - reserve) if rank > 0 else SLOTS
        room = [k for k in range(2) if loads[k] + 1 <= line]
        if room:
            return room[0]
        if a.priority != "critical":
            return None
        return 0 if loads[0] <= loads[1] else 1

    return decide


# Each entry builds a fresh router per simulation (the adaptive ones count arrivals).
ROUTERS: dict[str, Callable[[], Router]] = {
    "shed exactly the bursty tenant's sheddable requests in its burst, cheapest engine first,"
    " best effort when both are full": lambda: router(lambda a: a.tenant == "bursty", False, False),
    "the same, shedding a sheddable request when both are full": lambda: router(
        lambda a: a.tenant == "bursty", False, True
    ),
    "the same, least-loaded engine first": lambda: router(
        lambda a: a.tenant == "bursty", True, True
    ),
    "shed every sheddable request in the burst window, cheapest engine first": lambda: router(
        lambda a: a.in_burst, False, True
    ),
    "shed every sheddable request in the burst window, least-loaded engine first": lambda: router(
        lambda a: a.in_burst, True, True
    ),
    # A reserve for the critical class: critical / standard / batch lines, per engine of 8.
    "class lines 8 / 6 / 4 (the policy's shares)": lambda: lined(_lines(6, 4)),
    "class lines 8 / 5 / 3": lambda: lined(_lines(5, 3)),
    "class lines 8 / 4 / 2": lambda: lined(_lines(4, 2)),
    "class lines 8 / 3 / 1": lambda: lined(_lines(3, 1)),
    # Lines 8 / 6 / 4 lowered by a reserve for the bands above, from their last second's
    # arrivals (the data plane's flow control, docs/data_plane.md "Flow control").
    "class lines 8 / 6 / 4 less the higher bands' last-second demand (z = 0)": lambda: adaptive(
        _lines(6, 4)
    ),
    "the same, plus one standard deviation of that demand (z = 1)": lambda: adaptive(
        _lines(6, 4), z=1.0
    ),
}


@dataclass(frozen=True, slots=True)
class Bound:
    router: str
    steady_points_below_solo: float
    critical_in_burst: float  # attainment of the critical requests sent in the burst window
    critical_requests: int


def bounds(seconds: float = 45.0, seeds: int = 5) -> list[Bound]:
    cap = capacity_rps()
    steady, bursty = STEADY_SHARE * cap, BURSTY_SHARE * cap
    out = []
    for name, build in ROUTERS.items():
        solo_met = solo_n = burst_met = burst_n = crit_met = crit_n = 0
        for seed in range(seeds):
            solo = simulate(build(), schedule(seconds, {"steady": steady}, 0.0, seed), False)
            both = {"steady": steady, "bursty": bursty}
            run = simulate(build(), schedule(seconds, both, BURST_TIMES * cap, seed), True)
            solo_n += len(solo)
            solo_met += sum(ok for _, ok in solo)
            mine = [ok for a, ok in run if a.tenant == "steady"]
            burst_n, burst_met = burst_n + len(mine), burst_met + sum(mine)
            crit = [ok for a, ok in run if a.priority == "critical" and a.in_burst]
            crit_n, crit_met = crit_n + len(crit), crit_met + sum(crit)
        points = 100 * (solo_met / solo_n - burst_met / burst_n)
        out.append(Bound(name, points, crit_met / crit_n, crit_n))
    return out


def main() -> None:
    for b in bounds():
        print(
            f"{b.router}: steady tenant {b.steady_points_below_solo:.1f} points below solo; "
            f"critical in the burst window {b.critical_in_burst:.1%} of {b.critical_requests}"
        )


if __name__ == "__main__":
    main()
