"""A seeded request trace for the routing-quality section (PURE).

Each request: a prompt with a known answer, its category, an output length, a latency budget
and an accuracy floor, and an arrival time from a Poisson process at the nominal rate. The
same trace is replayed for every policy and load (arrival times divided by the load factor).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

CATEGORY_MIX = {"chat": 0.35, "extraction": 0.15, "code": 0.20, "math": 0.15, "reasoning": 0.15}
OUTPUT_TOKENS = {
    "chat": (16, 48),
    "extraction": (8, 24),
    "code": (32, 64),
    "math": (16, 48),
    "reasoning": (32, 64),
}
# Budget = fixed part + per-token allowance, tight / normal / loose.
BUDGET_FIXED_MS = 60
BUDGET_MS_PER_TOKEN = (8.0, 11.0, 16.0)


@dataclass(frozen=True, slots=True)
class TraceRequest:
    id: int
    at_s: float  # arrival offset at the nominal rate
    category: str
    prompt: str
    expected: Any
    scorer: str
    max_tokens: int
    budget_ms: int
    min_accuracy: float
    tests: str | None = None  # a code item's asserts: it is scored by them, not its text

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def make_trace(
    items: Mapping[str, Sequence[Mapping[str, Any]]],
    floors: Mapping[str, Sequence[float]],
    n: int,
    rate_rps: float,
    seed: int,
) -> list[TraceRequest]:
    """`n` requests at `rate_rps` (Poisson arrivals); deterministic for a seed."""
    rng = random.Random(seed)
    categories = list(CATEGORY_MIX)
    weights = [CATEGORY_MIX[c] for c in categories]
    at = 0.0
    trace = []
    for i in range(n):
        at += rng.expovariate(rate_rps)
        category = rng.choices(categories, weights)[0]
        item = rng.choice(items[category])
        low, high = OUTPUT_TOKENS[category]
        max_tokens = rng.randint(low, high)
        per_token = rng.choice(BUDGET_MS_PER_TOKEN)
        trace.append(
            TraceRequest(
                id=i,
                at_s=round(at, 6),
                category=category,
                prompt=str(item["prompt"]),
                expected=item["expected"],
                scorer=str(item["scorer"]),
                max_tokens=max_tokens,
                budget_ms=round(BUDGET_FIXED_MS + per_token * max_tokens),
                min_accuracy=rng.choice(list(floors[category])),
                tests=item.get("tests"),
            )
        )
    return trace
