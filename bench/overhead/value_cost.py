"""The CPU one request spends building its value types: the `per_request` classes it makes
(`data_plane.domain.per_request`: read-only to mypy, plain slotted dataclasses at run time)
against the same classes as frozen dataclasses (every field set through `object.__setattr__`).

Like `timer_cost`: a few microseconds that an end-to-end row cannot resolve, measured alone in
process CPU time, the two kinds alternated over several rounds, each one's median kept.
Construction cost does not depend on the field values, so every field gets None.
`python -m bench.overhead.value_cost` prints the note.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass, fields, make_dataclass
from typing import Any

from bench.common.stats import median_low
from data_plane.domain import (
    Budget,
    Candidate,
    RequestFacts,
    RouteDecision,
    RouteRequest,
)
from data_plane.request.body import ParsedBody
from data_plane.serving.attempt import AttemptLimit, Served
from data_plane.serving.usage import Usage
from data_plane.upstream.port import UpstreamRequest

# What one served, non-streamed request builds (one of each).
REQUEST_VALUES: tuple[type[Any], ...] = (
    ParsedBody,
    Budget,
    RequestFacts,
    RouteRequest,
    RouteDecision,
    Candidate,
    AttemptLimit,
    UpstreamRequest,
    Served,
    Usage,
)


@dataclass(frozen=True, slots=True)
class ValueCost:
    frozen_us: float  # per request
    per_request_us: float  # per request
    values: int
    fields: int
    requests: int
    rounds: int


def _frozen_twin(cls: type[Any]) -> type[Any]:
    names = [f.name for f in fields(cls)]
    return make_dataclass(cls.__name__, names, frozen=True, slots=True)


def _us_per_request(makers: list[tuple[type[Any], tuple[None, ...]]], n: int) -> float:
    gc.disable()
    try:
        started = time.process_time()
        for _ in range(n):
            for cls, args in makers:
                cls(*args)
        return (time.process_time() - started) / n * 1e6
    finally:
        gc.enable()


def measure_value_cost(requests: int = 50_000, rounds: int = 5) -> ValueCost:
    ours = [(cls, (None,) * len(fields(cls))) for cls in REQUEST_VALUES]
    frozen = [(_frozen_twin(cls), args) for cls, args in ours]
    kinds = {"frozen": frozen, "per_request": ours}
    for makers in kinds.values():  # warm
        _us_per_request(makers, 1000)
    timings: dict[str, list[float]] = {name: [] for name in kinds}
    for _ in range(rounds):
        for name, makers in kinds.items():
            timings[name].append(_us_per_request(makers, requests))
    return ValueCost(
        median_low(timings["frozen"]),
        median_low(timings["per_request"]),
        len(ours),
        sum(len(args) for _, args in ours),
        requests,
        rounds,
    )


def value_cost_note(cost: ValueCost) -> str:
    saved = cost.frozen_us - cost.per_request_us
    return (
        f"value types of one request ({cost.values} values, {cost.fields} fields; median of "
        f"{cost.rounds} x {cost.requests:,}, process CPU time): frozen dataclasses "
        f"{cost.frozen_us:.2f} µs, per_request {cost.per_request_us:.2f} µs ({saved:+.2f} µs "
        "per request for per_request)"
    )


if __name__ == "__main__":
    print(value_cost_note(measure_value_cost()))
