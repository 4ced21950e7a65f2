"""Why a critical request of the burst missed its budget, and how sure an attainment is (PURE).

Each request is followed from its client to the simulated engine (`burst.Traced`): when it was
scheduled to be sent, when the engine got it and how many requests the engine held then
(`simulator.engine.Engine.watch`), and when the client had the whole answer. Against the
simulator's truth (`burst.engine_latency_s`) a miss is:
- `full engine`: the router sent it to an engine that already held FIT or more (with it, more
  than the budget holds: the router's placement, on counts or a reserve that were short);
- `sent late` or `router late`: it reached an engine with room, but later than the budget
  allowed for the engine's time there (its time before the engine took more than the
  budget less the truth at that load), most of it before the client sent it (this
  process's event loop, which runs clients and engines, was late: the loaded machine) or
  in the router (its queue, or its CPU: `BurstRun.critical_queued` and the router's
  runnable time tell which);
- `engine late`: it reached an engine with room in time, and the engine took longer than the
  truth at that load by more than the slack left (the engine's own timers, which run in the
  benchmark's event loop: the loaded machine);
- `refused` or `no answer` (status 429, or none), `not traced` (no engine saw it: 503s).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from scipy.stats import beta

CAUSES = (
    "full engine",
    "router late",
    "sent late",
    "engine late",
    "refused",
    "no answer",
    "not traced",
)


@dataclass(frozen=True, slots=True)
class Path:
    """One request's way: seconds from its scheduled send to the engine and to the whole
    answer, and the requests the engine held when it arrived (it not included)."""

    status: int
    total_s: float
    budget_s: float
    to_engine_s: float | None  # None: no engine saw it
    held: int  # requests the engine held before it (running + waiting)
    sent_late_s: float = 0.0  # the client sent it that long after its scheduled time
    predicted_s: float | None = None  # the router's prediction at the load it judged
    reason: str = ""  # the router's X-Route-Reason
    at_s: float = 0.0  # its time in the schedule


def cause(path: Path, fit: int, truth_s: Callable[[int], float]) -> str:
    """Why a request that missed its budget missed it (`CAUSES`)."""
    if path.status == 429:
        return "refused"
    if path.status != 200:
        return "no answer" if path.status == 0 else "not traced"
    if path.to_engine_s is None:
        return "not traced"
    load = path.held + 1
    if load > fit:
        return "full engine"
    if path.to_engine_s > path.budget_s - truth_s(load):
        in_router = path.to_engine_s - path.sent_late_s
        return "sent late" if path.sent_late_s > in_router else "router late"
    return "engine late"


def causes(paths: Iterable[Path], fit: int, truth_s: Callable[[int], float]) -> dict[str, int]:
    """The misses among `paths` by cause (every cause listed, 0 where none)."""
    counts = dict.fromkeys(CAUSES, 0)
    for path in paths:
        if not (path.status == 200 and path.total_s <= path.budget_s):
            counts[cause(path, fit, truth_s)] += 1
    return counts


def clopper_pearson(met: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper-Pearson) `level` confidence interval of a share `met` of `n`;
    (nan, nan) for n = 0."""
    if n <= 0:
        return math.nan, math.nan
    alpha = 1.0 - level
    low = 0.0 if met == 0 else float(beta.ppf(alpha / 2, met, n - met + 1))
    high = 1.0 if met == n else float(beta.ppf(1 - alpha / 2, met + 1, n - met))
    return low, high
