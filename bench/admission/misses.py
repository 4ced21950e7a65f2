"""Why a critical request of the burst missed its budget, and how sure an attainment is (PURE).

Each request is followed from its client to the simulated engine (`burst.Traced`): when it was
scheduled to be sent, when the engine got it and how many requests the engine held then
(`simulator.engine.Engine.watch`), and when the client had the whole answer. Against the
simulator's truth (`burst.engine_latency_s`) a miss is:
- `full engine`: the router sent it to an engine that already held FIT or more (with it, more
  than the budget holds: the router's placement, on counts or a reserve that were short);
- `sent late`, `router queue` or `router CPU`: it reached an engine with room, but later
  than the budget allowed for the engine's time there (its time before the engine took
  more than the budget less the truth at that load), most of it before the client sent it
  (this process's event loop, which runs clients and engines, was late: the loaded
  machine) or in the router: `router queue` where its wait in flow control's queue
  (`X-Route-Queued-Ms`) is at least the time the router's event-loop thread was runnable
  but not running while the request was in the router (/proc schedstat, read when the
  client sent it and when the engine got it), `router CPU` otherwise (a request that did
  not wait in the queue spent its time there on the router's work or waiting for a CPU).
  The two can overlap (a queue that waits on a router starved of CPU): the larger names it;
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
    "router queue",
    "router CPU",
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
    queued_s: float = 0.0  # its wait in the router's queue (X-Route-Queued-Ms)
    # While it was in the router (sent to the engine's arrival): the router's event-loop
    # thread's time on a CPU, and runnable but not running (NaN: not read).
    router_cpu_s: float = math.nan
    router_runnable_s: float = math.nan

    @property
    def in_router_s(self) -> float:
        """From its send to the engine's arrival (0 where no engine saw it)."""
        return 0.0 if self.to_engine_s is None else self.to_engine_s - self.sent_late_s


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
        if path.sent_late_s > path.in_router_s:
            return "sent late"
        queued = path.queued_s  # not queued: its time there was the router's work or CPU
        by_queue = queued > 0 and not queued < path.router_runnable_s
        return "router queue" if by_queue else "router CPU"
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
