"""Headroom: admission's fast path, a proof that a request's fleet is not pressed from a bound
kept per table and request shape, so the fleet is not computed per request (docs/data_plane.md,
"Flow control"; issue 33).

PURE (a memo, no I/O, clock or logging). Admission serves a feasible decision unchanged when
its first pair has room: one of its live endpoints below the class's line, or below the pair's
sustainable concurrency while the fleet is not pressed (`saturation`). The first is one
sustainable figure and a comparison; the second needed the whole fleet, every pair of the
model predicted and its sustainable concurrency sought, on every request whose first pair
was past its line (issue 33; 7% of the event loop's samples at 64 connections in the
overhead section on 8c8a749). Here the fleet's load-independent part is kept instead: for
the request's shape (model, effective limits, ejected endpoints, the tenant's learned output
lengths, and its prompt length and the pairs' margins each rounded to a bucket; not its
class: the bound does not depend on it), a lower bound on what the fleet sustains
(`Bound.sustained`) and the endpoints of every pair that could be in it (`Bound.endpoints`).
The fleet is surely not pressed when the requests in flight at those endpoints, plus one,
are within the class's share of that bound: `unpressed`, the sums of a few loads.

Why the bound holds: on a pair whose prediction at every load, and whose cost, never fall
as the prompt grows (`prompt_monotone`; profiled tables have it) and with a margin that only
shrinks the budgets, a longer prompt or a larger margin never helps. So the pairs that meet
the request unloaded at the bucket's longest prompt also meet it at any shorter one, and any
pair that meets it at all meets it at the bucket's shortest prompt; each sustains at least
`capacity.steady_load` at the longest prompt and the largest margin rounded up (the loads
from 1 up that all meet: `sustainable_load`'s search stops at or above them whatever the
load curve's shape). A model with a pair whose prediction falls as the prompt grows gets
no bound (None): its requests take the full computation, as before. Whenever the bound says
"not pressed", the full computation says so too, so the verdict is the same
(property-tested, tests/unit/data_plane/test_headroom.py, load curves that fall included);
near the line it answers "do the full computation", never a different verdict. The higher
bands' reserve (`Seen.above`, issue 32) lowers the first pair's line and its limit while not
pressed, both read from `saturation.room_at` here as in the full computation; the bound is on
the sustainable concurrency, which the reserve leaves as it is, so no shape keys on it (the
property test draws higher bands' demand too).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import replace
from itertools import pairwise
from typing import NamedTuple

from data_plane.decision.capacity import steady_load
from data_plane.decision.feasibility import Limits, effective_limits, first_violation, predict
from data_plane.decision.saturation import Seen, room_at, unloaded
from data_plane.domain import (
    Candidate,
    CompiledPair,
    CompiledTable,
    HealthView,
    RouteRequest,
    ScanRow,
)

MAX_BOUNDS = 1024  # request shapes kept per table (least recently used dropped first)
_PROMPT_BITS = 3  # a prompt-length bucket spans at most 1/2**(_PROMPT_BITS - 1) of its start


Asked = tuple[CompiledTable, RouteRequest, HealthView]  # the request, as decided on
Judged = tuple[Seen, float]  # what admission reads, and the class's share


class Bound(NamedTuple):
    """One request shape's fleet, loads aside: a lower bound on its summed sustainable
    concurrency, and the live endpoints of every pair that could be in it."""

    sustained: float
    endpoints: tuple[str, ...]


class Shape(NamedTuple):
    """What a `Bound` depends on, with the prompt and the margins rounded to buckets."""

    alias: str
    limits: Limits
    ejected: frozenset[str]
    outputs: tuple[int | None, ...]  # per family of the model, its learned output tokens
    prompt: tuple[int, int]  # the prompt-length bucket: (shortest, longest) characters
    margin_ms: int  # every pair's margin, at most this (a power of two; 0: none)


def prompt_bucket(chars: int) -> tuple[int, int]:
    """(shortest, longest) characters of the bucket `chars` falls in: its top _PROMPT_BITS
    bits kept, so short prompts are exact and a long one's bucket spans at most a quarter of
    its length."""
    shift = max(0, chars.bit_length() - _PROMPT_BITS)
    low = (chars >> shift) << shift
    return low, low + (1 << shift) - 1


def margin_bucket_ms(margin_s: float) -> int:
    """The least power of two of milliseconds at or above `margin_s` (0 for no margin)."""
    if margin_s <= 0.0:
        return 0
    ms = 1 << max(0, math.ceil(math.log2(margin_s * 1000.0)))
    return ms if ms / 1000.0 >= margin_s else ms * 2  # (a rounding of the product)


def prompt_monotone(pair: CompiledPair) -> bool:
    """Whether `pair`'s prediction at every load, and its cost, never fall as the prompt
    grows (its per-input-token terms and input price are not negative): what the bound
    rests on. Profiled tables have it (`control_plane.build.fitting` keeps the per-level
    slopes non-decreasing from a non-negative fit); nothing is assumed of the load curve."""
    per_input = pair.ttft_per_input_by_load
    if per_input and min(per_input) < 0.0:
        return False
    return pair.ttft_per_input_token_s >= 0.0 and pair.input_usd_per_token >= 0.0


def load_rising(pair: CompiledPair) -> bool:
    """Whether `pair`'s prediction never falls as its load grows (its load terms per whole
    load, their per-input-token part included, never fall, nor its per-load coefficients
    beyond them): then a pair that meets a request at some load meets it at a load of 1.
    Profiled tables have it (the control plane's fit keeps the per-level terms
    non-decreasing)."""
    if pair.ttft_per_load_s < 0.0 or pair.tpot_per_load_s < 0.0:
        return False
    for terms in (pair.ttft_by_load, pair.tpot_by_load, pair.ttft_per_input_by_load):
        if any(later < earlier for earlier, later in pairwise(terms[1:])):  # from a load of 1
            return False
    return True


def _in_fleet(first: Candidate, limits: Limits, req: RouteRequest, health: HealthView) -> bool:
    """Whether `first`'s pair is in the request's fleet: it meets the request at a load of 1
    on its live endpoints (`saturation.unloaded`'s rule). A pair the decision found
    feasible at its load now always is, unless its prediction falls as load grows (a table
    the control plane's fit never builds): then the full computation, which leaves it out,
    decides (tests/unit/data_plane/test_headroom.py found one: feasible at a load of 2 and
    not at 1, and put first where admission put the fleet's pair with room first)."""
    live = tuple(e for e in first.pair.endpoints if e.id not in health.open_endpoints)
    unloaded_cand = predict(first.pair, live, req.facts.input_chars, limits.output_tokens, {})
    return first_violation(unloaded_cand, limits) is None


def bound_of(table: CompiledTable, req: RouteRequest, shape: Shape) -> Bound | None:
    """The bound for `req`'s shape (see the module docstring); None when a pair of its model
    has a pair whose prediction falls as the prompt grows (`prompt_monotone`)."""
    rows = table.scan_rows.get(shape.alias, ())
    if not all(prompt_monotone(row.pair) for row in rows):
        return None
    shortest, longest = shape.prompt
    margin_s = shape.margin_ms / 1000.0
    seen = Seen(None, 0.0, outputs=_outputs(rows, shape))
    health = HealthView(shape.ejected)
    at_longest = _at_chars(req, longest)
    sustained = 0.0
    for cand in unloaded(table, at_longest, health, (shape.limits, seen)):
        limits = seen.limits_for(shape.limits, cand.pair.family)
        per = steady_load(cand.pair, limits, longest, margin_s)
        sustained += per * len(cand.endpoints)
    widest = unloaded(table, _at_chars(req, shortest), health, (shape.limits, seen))
    return Bound(sustained, tuple(e.id for c in widest for e in c.endpoints))


def _at_chars(req: RouteRequest, chars: int) -> RouteRequest:
    return RouteRequest(replace(req.facts, input_chars=chars), req.budget)


def _outputs(rows: tuple[ScanRow, ...], shape: Shape) -> dict[tuple[str, str], int]:
    """The learned output lengths the shape holds, as `Seen.outputs` reads them."""
    return {
        (family, shape.limits.category): tokens
        for family, tokens in zip(families(rows), shape.outputs, strict=True)
        if tokens is not None
    }


def families(rows: tuple[ScanRow, ...]) -> tuple[str, ...]:
    """The families of a model's rows, each once, in the table's order."""
    return tuple(dict.fromkeys(row.pair.family for row in rows))


def unpressed(bound: Bound, load: Mapping[str, float], share: float) -> bool:
    """True when the fleet the bound is for is surely not pressed for a class of `share`:
    the requests in flight at every endpoint that could be in it, this one included, within
    the class's share of the least it sustains (`saturation.assemble`'s test, on bounds)."""
    get = load.get
    return sum(max(0.0, get(e, 0.0)) for e in bound.endpoints) + 1.0 <= share * bound.sustained


class Headroom:
    """The bounds of one table's request shapes, least recently used dropped past MAX_BOUNDS
    (a new table starts afresh)."""

    __slots__ = ("_bounds", "_families", "_rises", "_table")

    def __init__(self) -> None:
        self._table: CompiledTable | None = None
        self._bounds: OrderedDict[Shape, Bound | None] = OrderedDict()
        self._families: dict[str, tuple[str, ...]] = {}
        self._rises: dict[str, bool] = {}  # per pair, `load_rising`

    @property
    def kept(self) -> int:
        """How many request shapes' bounds are kept now (at most MAX_BOUNDS)."""
        return len(self._bounds)

    def room_for(
        self, first: Candidate, asked: Asked, judged: Judged, bounded: bool = True
    ) -> bool:
        """Whether a feasible decision whose first candidate is `first` is served as decided
        without the fleet: nothing in flight at its endpoint; or its pair's least loaded live
        endpoint below the class's line; or below its sustainable concurrency while the
        fleet is surely not pressed (`unpressed`; only when `bounded`, else the bound is
        neither read nor kept). False: the caller computes the fleet (`saturation.fleet_of`),
        as admission always did."""
        if first.load <= 1.0:
            return True  # nothing in flight at its endpoint: room for any class
        table, req, health = asked
        seen, share = judged
        limits = seen.limits_for(effective_limits(table, req), first.pair.family)
        if not self._rising(table, first.pair) and not _in_fleet(first, limits, req, health):
            return False  # feasible only under load (a falling load curve): not in its fleet
        margin = seen.margin_s(first.pair.pair)
        room = room_at(first, limits, req, health, (share, margin), seen.above_rps(first.pair.pair))
        if room.has_room:
            return True
        below = room.least + 1.0 <= room.limit(pressed=False)
        return below and bounded and self.unpressed(table, req, health, judged)

    def unpressed(
        self,
        table: CompiledTable,
        req: RouteRequest,
        health: HealthView,
        judged: tuple[Seen, float],
    ) -> bool:
        """Whether `req`'s fleet is surely not pressed now for a class of share `judged[1]`
        (`judged[0]`: what admission reads); False: not surely, the fleet is computed."""
        self._fresh(table)
        shape = self._shape(table, req, health, judged[0])
        bounds = self._bounds
        if shape in bounds:
            bounds.move_to_end(shape)
            bound = bounds[shape]
        else:
            bound = bounds[shape] = bound_of(table, req, shape)
            if len(bounds) > MAX_BOUNDS:
                bounds.popitem(last=False)
        return bound is not None and unpressed(bound, health.load, judged[1])

    def _fresh(self, table: CompiledTable) -> None:
        """What is kept belongs to `table`: a new table starts afresh."""
        if table is not self._table:
            self._table, self._families, self._rises = table, {}, {}
            self._bounds.clear()

    def _rising(self, table: CompiledTable, pair: CompiledPair) -> bool:
        """`load_rising(pair)`, kept per table."""
        self._fresh(table)
        rises = self._rises.get(pair.pair)
        if rises is None:
            rises = self._rises[pair.pair] = load_rising(pair)
        return rises

    def _shape(
        self, table: CompiledTable, req: RouteRequest, health: HealthView, seen: Seen
    ) -> Shape:
        """The request's shape (see `Shape`)."""
        alias = req.facts.alias
        rows = table.scan_rows.get(alias, ())
        names = self._families.get(alias)
        if names is None:
            names = self._families[alias] = families(rows)
        limits = effective_limits(table, req)
        outputs: tuple[int | None, ...] = (None,) * len(names)
        if seen.outputs:
            learned = seen.outputs
            outputs = tuple(learned.get((f, limits.category)) for f in names)
        margin = 0.0
        if seen.margins:
            margin = max((seen.margin_s(row.pair.pair) for row in rows), default=0.0)
        prompt = prompt_bucket(req.facts.input_chars)
        ejected = health.open_endpoints
        return Shape(alias, limits, ejected, outputs, prompt, margin_bucket_ms(margin))
