"""What the pairs that could serve a request sustain within its budget, and whether the
work offered to them exceeds it (docs/data_plane.md, "Tenants, priorities and admission").

PURE. A pair's *sustainable concurrency* for a request is the largest whole load (this
request included) at which the table's prediction for it still meets its latency and TTFT
budgets, at most the highest profiled load. The request's *fleet* is the pairs that would
serve it unloaded (the first `FLEET_PAIRS` in the table's cost order); it is
*overloaded* when the concurrency offered to them exceeds this replica's part of their
summed sustainable concurrency. Offered concurrency is Little's law on recent arrivals:
each request this replica sent (or shed) there counts its predicted seconds, and the seconds
arriving a second, averaged over about `WORK_WINDOW_S`, are the requests that traffic keeps
in flight. Only an overloaded fleet sheds (`admission`, `fair_share`): a moment at full
concurrency under a lighter load drains by itself, and its request is served as decided.
What else could explain an overload: predictions slower than the engines now are (a table
to refit), which overstate both the work and the load it causes.

The table predicts the engine's time, not the client's: the router's own time and the
prediction's error at that load come on top. Each pair's *margin* (`resilience.overshoot`: a
high quantile of this replica's recent answers' observed minus predicted seconds, each client
limited to its share of the samples, decaying over `MARGIN_WINDOW_S` once answers stop) is
taken off the budgets before the sustainable load is sought, at most `MAX_MARGIN_SHARE` of
each budget. What else could explain a margin: engines slower than profiled (a refit
narrows it) or a slow network to them; both make the answers late, which is what it counts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

from data_plane.decision.feasibility import (
    Limits,
    effective_limits,
    first_violation,
    input_tokens,
    predict,
)
from data_plane.domain import (
    Candidate,
    CompiledPair,
    CompiledTable,
    HealthView,
    RouteRequest,
    load_terms,
)

FLEET_PAIRS = 8  # the cheapest pairs that meet a request unloaded, taken as its fleet
WORK_WINDOW_S = 0.5  # time constant of the offered work (`resilience.arrivals`)
MARGIN_WINDOW_S = 10.0  # time constant of a pair's margin once its answers stop
MAX_MARGIN_SHARE = 0.25  # at most this share of a budget is taken off as a margin


def predicted_at(pair: CompiledPair, limits: Limits, input_chars: int, load: float) -> float:
    """Predicted seconds for the whole answer at `load` (this request included)."""
    tokens = input_tokens(pair, input_chars)
    ttft_load, tpot_load = load_terms(pair, load, tokens)
    ttft0 = pair.ttft_base_s + pair.ttft_per_input_token_s * tokens
    return ttft0 + ttft_load + limits.output_tokens * (pair.tpot_base_s + tpot_load)


def _meets(pair: CompiledPair, limits: Limits, prompt: tuple[float, int], load: int) -> bool:
    """Whether the prediction at `load` meets the budgets; `prompt`: (TTFT at no load for
    the prompt, its tokens)."""
    ttft0_s, tokens = prompt
    ttft_load, tpot_load = load_terms(pair, load, tokens)
    ttft = ttft0_s + ttft_load
    if limits.ttft_s is not None and ttft > limits.ttft_s:
        return False
    total = ttft + limits.output_tokens * (pair.tpot_base_s + tpot_load)
    return limits.latency_s is None or total <= limits.latency_s


def less_margin(limits: Limits, margin_s: float) -> Limits:
    """`limits` with `margin_s` taken off each latency and TTFT budget, at most
    MAX_MARGIN_SHARE of each (a wild margin cannot take a whole budget away)."""
    if margin_s <= 0.0:
        return limits
    lat, ttft = limits.latency_s, limits.ttft_s
    return limits._replace(
        latency_s=None if lat is None else lat - min(margin_s, MAX_MARGIN_SHARE * lat),
        ttft_s=None if ttft is None else ttft - min(margin_s, MAX_MARGIN_SHARE * ttft),
    )


def sustainable_load(
    pair: CompiledPair, limits: Limits, input_chars: int, margin_s: float = 0.0
) -> float:
    """The largest whole load per endpoint (this request included) at which `pair` meets the
    request's budgets less `margin_s` (`less_margin`), at most `max_profiled_load`; 0 when
    even an idle endpoint misses them, the profiled maximum (inf when unknown) for a request
    without latency or TTFT budget. The per-load coefficients' line gives a first guess,
    which steps of one load correct to the tabulated terms (they grow with load: a profile's
    latency does not fall as concurrency rises)."""
    top = pair.max_profiled_load
    if limits.latency_s is None and limits.ttft_s is None:
        return top
    limits = less_margin(limits, margin_s)
    top = top if math.isfinite(top) else float(1 << 16)
    tokens = input_tokens(pair, input_chars)
    ttft0 = pair.ttft_base_s + pair.ttft_per_input_token_s * tokens
    guess = top
    if limits.latency_s is not None:
        per = pair.ttft_per_load_s + limits.output_tokens * pair.tpot_per_load_s
        room = limits.latency_s - ttft0 - limits.output_tokens * pair.tpot_base_s
        guess = min(guess, room / per if per > 0 else top)
    if limits.ttft_s is not None and pair.ttft_per_load_s > 0:
        guess = min(guess, (limits.ttft_s - ttft0) / pair.ttft_per_load_s)
    load = int(max(0.0, min(top, guess)))
    while load > 0 and not _meets(pair, limits, (ttft0, tokens), load):
        load -= 1
    while load < top and _meets(pair, limits, (ttft0, tokens), load + 1):
        load += 1
    return float(load)


def fleet_sustainable(
    pair: CompiledPair, limits: Limits, input_chars: int, margin_s: float
) -> float:
    """`sustainable_load` for a pair that meets the request unloaded on the table's word (a
    fleet's, or the one chosen): at least one request per endpoint. When only the margin
    says an idle endpoint would miss the budget, the miss is our prediction's error, not
    load: no wait makes room for it, so it never counts as an overload (a margin of 17 ms
    on a tight budget made an idle pair's capacity 0 and shed requests with nothing in
    flight anywhere)."""
    return max(1.0, sustainable_load(pair, limits, input_chars, margin_s))


@dataclass(frozen=True, slots=True)
class FleetPair:
    """One pair of a request's fleet and its sustainable concurrency per live endpoint."""

    candidate: Candidate  # predicted at zero load (its live endpoints)
    per_endpoint: float

    @property
    def pair(self) -> str:
        return self.candidate.pair.pair


@dataclass(frozen=True, slots=True)
class Fleet:
    """The request's fleet now (see the module docstring)."""

    pairs: tuple[FleetPair, ...]
    capacity: float  # this replica's part of the summed sustainable concurrency
    load: float  # requests in flight at the fleet's live endpoints (all replicas, queues)
    part: float  # this replica's part: (its own in flight + 1) / (load + 1), at most 1
    offered: float  # concurrency the work this replica saw arrive there asks for
    overloaded: bool
    latency_now_s: float  # the first pair's predicted latency at its first endpoint's load

    def sustainable(self, pair: str) -> float:
        """The per-endpoint sustainable concurrency of `pair` (0: not in the fleet)."""
        return next((p.per_endpoint for p in self.pairs if p.pair == pair), 0.0)


class Seen(NamedTuple):
    """What this replica saw for one decision: its requests in flight per pair and tenant,
    and per pair the work arriving (`resilience.arrivals`) and the margin its answers ask for
    (`resilience.overshoot`), read at `now`. A door that sends no request itself (gateway
    mode) sees none: the offered concurrency is then the load, this request included, its
    part of the fleet the whole, and no margin is taken."""

    tenants: Mapping[str, Mapping[str, int]] | None
    work: Mapping[str, tuple[float, float]] | None
    now: float
    all_work: tuple[float, float] | None = None  # summed over every pair (`calm`)
    margins: Mapping[str, tuple[float, float]] | None = None  # pair -> (seconds, at)

    def margin_s(self, pair: str) -> float:
        """`pair`'s margin now: its last estimate, decaying over MARGIN_WINDOW_S since."""
        raw = None if self.margins is None else self.margins.get(pair)
        if raw is None:
            return 0.0
        value, at = raw
        return value * math.exp(-max(0.0, self.now - at) / MARGIN_WINDOW_S)


def decayed(raw: tuple[float, float] | None, now: float) -> float:
    """An exponentially weighted rate (value, at) read at `now` (`resilience.arrivals`)."""
    if raw is None:
        return 0.0
    value, at = raw
    return value * math.exp(-max(0.0, now - at) / WORK_WINDOW_S)


def calm(
    table: CompiledTable, req: RouteRequest, health: HealthView, result: Candidate, seen: Seen
) -> bool:
    """True when the work this replica sends to every pair together is within what the pair
    `result` chose (meeting the budget now) sustains alone for its part: no fleet holding that
    pair can then be overloaded (unless this replica's part of another pair is much smaller),
    and the fleet is not worth computing. A few microseconds; False when it cannot tell."""
    if seen.all_work is None or seen.tenants is None:
        return False
    pair = result.pair
    limits = effective_limits(table, req)
    per = fleet_sustainable(pair, limits, req.facts.input_chars, seen.margin_s(pair.pair))
    load = sum(health.load.get(e.id, 0.0) for e in result.endpoints)
    mine = sum(seen.tenants.get(pair.pair, {}).values())
    part = min(1.0, (mine + 1.0) / (load + 1.0))
    return decayed(seen.all_work, seen.now) <= per * len(result.endpoints) * part


def fleet_of(
    table: CompiledTable, req: RouteRequest, health: HealthView, seen: Seen
) -> Fleet | None:
    """The request's fleet, or None when no pair meets it even unloaded (a miss no load
    explains)."""
    limits = effective_limits(table, req)
    cands = _unloaded(table, req, health, limits)
    return _assemble(cands, limits, req, health, seen) if cands else None


def _unloaded(
    table: CompiledTable, req: RouteRequest, health: HealthView, limits: Limits
) -> tuple[Candidate, ...]:
    """The first FLEET_PAIRS pairs of the request's model, in the table's cost order, that
    meet every rule at zero load with an endpoint not ejected (the rules of `choose_route`,
    without its full ordering of every feasible pair, which a fleet does not need)."""
    chars, out = req.facts.input_chars, limits.output_tokens
    found: list[Candidate] = []
    for row in table.scan_rows.get(req.facts.alias, ()):
        live = tuple(e for e in row.endpoints if e.id not in health.open_endpoints)
        if not live:
            continue
        cand = predict(row.pair, live, chars, out, {})
        if first_violation(cand, limits) is None:
            found.append(cand)
            if len(found) == FLEET_PAIRS:
                break
    return tuple(found)


def pair_fleet(
    table: CompiledTable, req: RouteRequest, health: HealthView, cand: Candidate, seen: Seen
) -> Fleet:
    """A fleet of the one pair `cand` (a canary's baseline: the router does not choose it)."""
    return _assemble((cand,), effective_limits(table, req), req, health, seen)


def _assemble(
    cands: tuple[Candidate, ...],
    limits: Limits,
    req: RouteRequest,
    health: HealthView,
    seen: Seen,
) -> Fleet:
    tenants, work, now = seen.tenants, seen.work, seen.now
    chars = req.facts.input_chars
    pairs: list[FleetPair] = []
    total = load = mine = offered = 0.0
    for cand in cands:
        margin = seen.margin_s(cand.pair.pair)
        pairs.append(FleetPair(cand, fleet_sustainable(cand.pair, limits, chars, margin)))
        total += pairs[-1].per_endpoint * len(cand.endpoints)
        load += sum(health.load.get(e.id, 0.0) for e in cand.endpoints)
        if tenants is not None:
            mine += sum(tenants.get(cand.pair.pair, {}).values())
        if work is not None:
            offered += decayed(work.get(cand.pair.pair), now)
    # This request counted as this replica's own.
    part = 1.0 if tenants is None else min(1.0, (mine + 1.0) / (load + 1.0))
    if work is None:
        offered = load + 1.0
    first = cands[0]
    now_s = predicted_at(
        first.pair, limits, chars, health.load.get(first.endpoints[0].id, 0.0) + 1.0
    )
    return Fleet(tuple(pairs), total * part, load, part, offered, offered > total * part, now_s)
