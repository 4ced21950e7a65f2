"""Observed saturation: whether the pairs that could serve a request have room for it now
(docs/data_plane.md, "Flow control").

PURE. A request's *fleet* is every pair of its model that meets it unloaded (the table's word,
at a load of 1, with an endpoint not ejected), in the table's cost order. A pair *has room*
when one of its live endpoints has fewer requests in flight than the request may fill there:
the pair's sustainable concurrency (`capacity.fleet_sustainable`: at which the budget less the
pair's margin still holds, at least 1), or, while the fleet is *pressed*, its class's line
(`capacity.class_line`: its share of that, at least 1). The fleet is pressed for a class when
its requests in flight, this one included, exceed the class's share of what the fleet
sustains: only then is the rest kept for the classes above, so a class with share 0.75 fills
a cheap pair to its sustainable concurrency while the fleet has room to spare, and stops at
its line on every pair once the fleet is three-quarters busy. While the bands above the class
are busy at a pair (`Seen.above`: their requests per second decided there over the last
second), both figures are lowered to the sustainable concurrency less their demand
(`capacity.reserved_line`: that rate x the pair's service time / its endpoints, never below 1;
none for the top band), so the slots a surge of a higher band will need are kept for it, not
taken by a lower class first (running requests are not pre-empted; issue 32). In flight is what
`HealthView.load` holds: this replica's requests, the other replicas' shared counts and the
engines' scraped waiting queue. Nothing refused or queued counts: a refused request never
reached an engine, and a queued one waits in this replica's queue, not at the pair. The fleet
is *full* when no pair has room. Every figure here is taken at the request's predicted output
length on the pair's family (`Seen.limits_for`: the tenant's learned figure, at most its
`max_tokens`, `resilience.output_length`), not at `max_tokens` alone.

The invariant this gives (property-tested, tests/unit/data_plane/test_saturation_props.py):
a pair that meets the request unloaded and has nothing in flight always has room, so such a
request is never queued or refused while that pair is idle; and it is never refused while
such a pair is below its class line (nor, while the fleet is not pressed, below its
sustainable concurrency less the reserve).

What it cannot know: requests other replicas sent since their last shared count, and queues
the engines built since their last scrape (both lag by their intervals); an engine slower than
its profile (the margin takes part of that off the budget).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import NamedTuple

from data_plane.decision.capacity import (
    MARGIN_WINDOW_S,
    fleet_sustainable,
    predicted_at,
    reserve_per_endpoint,
    reserved_line,
)
from data_plane.decision.feasibility import Limits, effective_limits, first_violation, predict
from data_plane.domain import Candidate, CompiledTable, HealthView, RouteRequest, per_request


class Seen(NamedTuple):
    """What this replica saw for one decision: its requests in flight per pair and tenant
    (None: a door that keeps no tenant counts), the tenants it refused lately
    per pair (tenant -> when), and per pair the margin its answers ask for, read at `now`."""

    tenants: Mapping[str, Mapping[str, int]] | None
    now: float
    margins: Mapping[str, tuple[float, float]] | None = None  # pair -> (seconds, at)
    refused: Mapping[str, Mapping[str, float]] | None = None  # pair -> tenant -> at
    # The requesting tenant's (family, category) -> the output tokens its answers run to
    # (`resilience.output_length`)
    outputs: Mapping[tuple[str, str], int] | None = None
    # pair -> requests per second of the bands above the request's class decided there
    # lately (`resilience.band_arrivals`; pairs with none left out): what its line keeps
    above: Mapping[str, float] | None = None

    def above_rps(self, pair: str) -> float:
        """The bands above the request's class: their requests per second at `pair`."""
        return 0.0 if not self.above else self.above.get(pair, 0.0)

    def margin_s(self, pair: str) -> float:
        """`pair`'s margin now: its last estimate, decaying over MARGIN_WINDOW_S since."""
        raw = None if self.margins is None else self.margins.get(pair)
        if raw is None:
            return 0.0
        value, at = raw
        return value * math.exp(-max(0.0, self.now - at) / MARGIN_WINDOW_S)

    def limits_for(self, limits: Limits, family: str) -> Limits:
        """`limits` for a pair of `family`: its output tokens the learned figure for the
        family and the request's category where that is smaller (the request's max_tokens,
        or the category's typical output, where it is not, or none is learned yet)."""
        learned = None if self.outputs is None else self.outputs.get((family, limits.category))
        if learned is None or learned >= limits.output_tokens:
            return limits
        return limits._replace(output_tokens=learned)


@per_request
class PairRoom:
    """One pair of a request's fleet: its sustainable concurrency and the class's line per
    live endpoint, and what is in flight there now."""

    candidate: Candidate  # predicted at zero load (its live endpoints)
    limits: Limits  # the request's, at the output length predicted on this pair
    per_endpoint: float
    line: float
    load: float  # requests in flight at its live endpoints, summed
    least: float  # at its least loaded live endpoint
    # per_endpoint less the bands above the class's demand there (`capacity.reserved_line`
    # at a share of 1): what it may fill while the fleet is not pressed
    ceiling: float = math.inf

    @property
    def pair(self) -> str:
        return self.candidate.pair.pair

    @property
    def has_room(self) -> bool:
        """Room below the class's line (what the fast path checks: room whether or not the
        fleet is pressed)."""
        return self.least + 1.0 <= self.line

    def limit(self, pressed: bool) -> float:
        """The requests per endpoint this one may make: the class's line while the fleet is
        pressed, else the sustainable concurrency less the higher bands' reserve (`ceiling`)."""
        return self.line if pressed else min(self.per_endpoint, self.ceiling)


@per_request
class Fleet:
    """The request's fleet now (see the module docstring)."""

    pairs: tuple[PairRoom, ...]
    capacity: float  # this replica's part of the summed class lines
    load: float  # requests in flight at the fleet's live endpoints (all replicas, queues)
    part: float  # this replica's part: (its own in flight + 1) / (load + 1), at most 1
    pressed: bool  # load + 1 past the class's share of the summed sustainable concurrency
    # Requests other tenants hold here past their fair shares, which this request's tenant,
    # within its own, may add to the class's line (`fair_share.lent_past_shares`; 0: none)
    lent: float = 0.0

    @property
    def full(self) -> bool:
        return not self.with_room()

    def with_room(self) -> frozenset[str]:
        return frozenset(p.pair for p in self.pairs if p.least + 1.0 <= self._limit(p))

    def _limit(self, p: PairRoom) -> float:
        """What `p`'s endpoints may hold for this request: its limit, past the class's line
        by what is lent, never past the sustainable concurrency (the budget still holds) nor
        into the higher bands' reserve (`PairRoom.ceiling`)."""
        return min(p.per_endpoint, p.ceiling, p.limit(self.pressed) + self.lent)


def room_at(
    cand: Candidate,
    limits: Limits,
    req: RouteRequest,
    health: HealthView,
    klass: tuple[float, float],
    above_rps: float = 0.0,
) -> PairRoom:
    """`cand`'s pair for this request, at `limits` (`Seen.limits_for` the pair's family);
    `klass`: (the class's share, the pair's margin); `above_rps`: the bands above the
    class, their requests per second at the pair (`Seen.above_rps`), which its line keeps
    room for (`capacity.reserved_line`)."""
    share, margin = klass
    chars = req.facts.input_chars
    per = fleet_sustainable(cand.pair, limits, chars, margin)
    reserve = 0.0
    if above_rps > 0.0:
        service_s = predicted_at(cand.pair, limits, chars, per)
        reserve = reserve_per_endpoint(above_rps, service_s, len(cand.endpoints))
    loads = [health.load.get(e.id, 0.0) for e in cand.endpoints]
    line = reserved_line(per, share, reserve)
    ceiling = reserved_line(per, 1.0, reserve)
    return PairRoom(cand, limits, per, line, sum(loads), min(loads), ceiling)


def fleet_of(
    table: CompiledTable, req: RouteRequest, health: HealthView, seen: Seen, share: float
) -> Fleet | None:
    """The request's fleet for a class of `share`, or None when no pair meets the request
    even unloaded (a miss no load explains)."""
    limits = effective_limits(table, req)
    cands = unloaded(table, req, health, (limits, seen))
    return assemble(cands, (req, limits), health, seen, share) if cands else None


def unloaded(
    table: CompiledTable, req: RouteRequest, health: HealthView, judged: tuple[Limits, Seen]
) -> tuple[Candidate, ...]:
    """Every pair of the request's model, in the table's cost order, that meets every rule
    at a load of 1 with an endpoint not ejected, at the output length predicted for its
    family (`judged`: the request's limits, and what `Seen.limits_for` reads)."""
    limits, seen = judged
    chars = req.facts.input_chars
    found: list[Candidate] = []
    for row in table.scan_rows.get(req.facts.alias, ()):
        live = tuple(e for e in row.endpoints if e.id not in health.open_endpoints)
        if not live:
            continue
        mine = seen.limits_for(limits, row.pair.family)
        cand = predict(row.pair, live, chars, mine.output_tokens, {})
        if first_violation(cand, mine) is None:
            found.append(cand)
    return tuple(found)


def assemble(
    cands: tuple[Candidate, ...],
    asked: tuple[RouteRequest, Limits],
    health: HealthView,
    seen: Seen,
    share: float,
) -> Fleet:
    """The fleet of `cands` (a canary's baseline alone, or the pairs `unloaded` found), for
    the request and its effective limits."""
    req, limits = asked
    pairs = tuple(
        room_at(
            c,
            seen.limits_for(limits, c.pair.family),
            req,
            health,
            (share, seen.margin_s(c.pair.pair)),
            seen.above_rps(c.pair.pair),
        )
        for c in cands
    )
    load = sum(p.load for p in pairs)
    mine = 0.0
    if seen.tenants is not None:
        mine = sum(sum(seen.tenants.get(p.pair, {}).values()) for p in pairs)
    # This request counted as this replica's own; a door that keeps no tenant counts has
    # the whole fleet as its part.
    part = 1.0 if seen.tenants is None else min(1.0, (mine + 1.0) / (load + 1.0))
    capacity = sum(p.line * len(p.candidate.endpoints) for p in pairs) * part
    sustained = sum(p.per_endpoint * len(p.candidate.endpoints) for p in pairs)
    return Fleet(pairs, capacity, load, part, load + 1.0 > share * sustained)


def latency_now_s(room: PairRoom, input_chars: int) -> float:
    """`room`'s predicted seconds at its least loaded endpoint's load, this request included."""
    return predicted_at(room.candidate.pair, room.limits, input_chars, room.least + 1.0)
