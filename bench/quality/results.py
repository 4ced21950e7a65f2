"""Result types of the routing-quality section (section 3); pure data."""

from __future__ import annotations

from dataclasses import dataclass, field

# The routing-quality fleet replayed under the quality-first objective (`quality.replay_ladder`).
QUALITY_FIRST = "gearbox-quality-first"


@dataclass(frozen=True, slots=True)
class FloorGroup:
    """Requests of one category that asked for the same accuracy floor."""

    floor: float
    requests: int
    correct: int
    accuracy: float
    met: bool  # measured accuracy is not significantly below the floor (one-sided 95%)


@dataclass(frozen=True, slots=True)
class CategoryOutcome:
    category: str
    requests: int
    correct: int
    accuracy: float
    groups: tuple[FloorGroup, ...]

    @property
    def floors_met(self) -> bool:
        return all(g.met for g in self.groups)


@dataclass(frozen=True, slots=True)
class PolicyOutcome:
    policy: str
    load: float  # multiple of the nominal rate
    rate_rps: float
    requests: int
    ok: int
    cost_usd_per_1k: float
    budget_attainment: float  # share of all requests answered 2xx within their latency budget
    p50_latency_ms: float
    p99_latency_ms: float
    categories: tuple[CategoryOutcome, ...]
    share_by_pair: dict[str, float] = field(default_factory=dict)
    client_max_lag_ms: float = 0.0  # the replay client's worst event-loop wake-up delay

    @property
    def floors_met(self) -> bool:
        return all(c.floors_met for c in self.categories)


@dataclass(frozen=True, slots=True)
class PairFacts:
    pair: str
    input_usd_per_mtok: float
    output_usd_per_mtok: float
    profiled_accuracy: dict[str, float]
    simulated_accuracy: dict[str, float]


@dataclass(frozen=True, slots=True)
class LoopRow:
    """Gearbox at one load with the latency refit loop off, then on (`bench.quality.loop`)."""

    load: float
    requests: int
    attainment_off: float  # budget attainment, loop off (table v1 throughout)
    attainment_on: float  # the same replay with the loop on
    refits: int  # tables the loop published during the loop-on replay


@dataclass(frozen=True, slots=True)
class QualityResult:
    seed: int
    trace_requests: int
    nominal_rps: float
    most_precise_pair: str
    cheapest_pair: str
    pairs: tuple[PairFacts, ...]
    outcomes: tuple[PolicyOutcome, ...]
    notes: tuple[str, ...] = ()
    loop: tuple[LoopRow, ...] = ()  # gearbox with the latency refit loop off and on

    def outcome(self, policy: str, load: float) -> PolicyOutcome | None:
        return next((o for o in self.outcomes if o.policy == policy and o.load == load), None)
