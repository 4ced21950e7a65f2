"""Admission's fast path (decision/headroom.py, issue 33) against the full computation, over
random tables (load curves that rise and that fall), budgets, prompts, margins, learned
output lengths, ejected endpoints, classes and loads drawn around each pair's line and
sustainable concurrency:

- wherever the fast path serves a decision as decided, `admit` on the whole fleet
  (`saturation.fleet_of`) serves it unchanged too, so every admit/queue/refuse verdict is
  the full computation's;
- where its bound is exact (a prompt shorter than a bucket's step; one margin for every
  pair, a power of two of milliseconds, or none; load curves that rise), it serves a
  decision as decided exactly when the full computation finds room on its first pair: an
  off-by-one either way in its thresholds fails here.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contracts.policy import Policy, PriorityClass
from contracts.profile_report import ProfileReport
from control_plane.build.table import build_table
from data_plane.asked import Full
from data_plane.decision.admission import Shed, admit
from data_plane.decision.capacity import fleet_sustainable, steady_load
from data_plane.decision.choose import choose_route
from data_plane.decision.compile import compile_table
from data_plane.decision.feasibility import Limits, effective_limits
from data_plane.decision.headroom import (
    Headroom,
    bound_of,
    margin_bucket_ms,
    prompt_bucket,
    prompt_monotone,
)
from data_plane.decision.saturation import Fleet, Seen, fleet_of
from data_plane.decision_step import Decidable, DecisionStep, StepParts
from data_plane.domain import (
    Budget,
    CompiledTable,
    HealthView,
    NoRoute,
    RequestFacts,
    RouteDecision,
    RouteReason,
    RouteRequest,
)
from data_plane.resilience.endpoint_load import LoadTracker
from data_plane.table_store import TableStore
from data_plane.telemetry.metrics import DataPlaneMetrics
from tests.unit.data_plane.tables import CATEGORIES, entry, table

_SETTINGS = settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
_FEASIBLE = (RouteReason.CHEAPEST_FEASIBLE, RouteReason.MOST_PRECISE_FEASIBLE)

Case = tuple[CompiledTable, RouteRequest, HealthView, Seen, float]


@st.composite
def _table(draw: st.DrawFn, bent: bool) -> CompiledTable:
    entries: list[dict[str, Any]] = []
    for i in range(draw(st.integers(1, 4))):
        e = entry(
            draw(st.sampled_from(["f", "g"])),
            f"q{i}",
            endpoints=draw(st.integers(1, 2)),
            input_usd_per_mtok=draw(st.floats(0.0, 5.0)),
            output_usd_per_mtok=draw(st.floats(0.0, 20.0)),
            ttft_base_s=draw(st.floats(0.0, 0.5)),
            ttft_per_input_token_s=draw(st.floats(0.0, 1e-3)),
            ttft_per_load_s=draw(st.floats(0.0, 0.1)),
            tpot_base_s=draw(st.floats(0.001, 0.03)),
            tpot_per_load_s=draw(st.floats(0.0, 0.005)),
            accuracy={c: draw(st.floats(0.5, 1.0)) for c in CATEGORIES},
            precision_rank=i,
        )
        top = draw(st.integers(1, 24))
        e["latency"]["max_profiled_load"] = top
        if bent and top >= 3 and draw(st.booleans()):  # terms per level, falling as often as not
            levels = [1, top // 2 + 1, top]
            e["latency"].update(
                load_levels=levels,
                ttft_load_s=[draw(st.floats(0.0, 0.5)) for _ in levels],
                tpot_load_s=[draw(st.floats(0.0, 0.01)) for _ in levels],
                ttft_rmse_load_s=[draw(st.floats(0.0, 0.1)) for _ in levels],
                tpot_rmse_load_s=[draw(st.floats(0.0, 0.002)) for _ in levels],
            )
        entries.append(e)
    return compile_table(table(entries))


def _to_the_press(draw: st.DrawFn, idle: Fleet, share: float, load: dict[str, float]) -> None:
    """Top one endpoint of the fleet up so that its load, one more request included, is
    within one of the class's share of what the fleet sustains (where it becomes pressed)."""
    sustained = sum(p.per_endpoint * len(p.candidate.endpoints) for p in idle.pairs)
    ids = [e.id for p in idle.pairs for e in p.candidate.endpoints]
    target = math.floor(share * sustained) - 1 + draw(st.integers(-1, 1))
    missing = target - sum(load[i] for i in ids)
    if missing > 0:
        at = draw(st.sampled_from(ids))
        load[at] += missing


def _near(per: float, line: float) -> st.SearchStrategy[float]:
    """In-flight counts around a pair's line and sustainable concurrency (and idle)."""
    marks = [0.0, line - 1.0, line, per - 1.0, per, per + 1.0]
    return st.sampled_from([m for m in marks if m >= 0.0])


@st.composite
def _case(draw: st.DrawFn, exact: bool) -> Case:
    t = draw(_table(bent=not exact))
    chars = draw(st.integers(0, 7) if exact else st.integers(0, 20_000))
    facts = RequestFacts("f", "chat", 0.3, chars, draw(st.integers(1, 1500)))
    budget = Budget(
        latency_s=draw(st.floats(0.05, 30.0)), ttft_s=draw(st.none() | st.floats(0.02, 3.0))
    )
    req = RouteRequest(facts, budget)
    share = draw(st.sampled_from([0.25, 0.5, 0.75, 1.0]) | st.floats(0.01, 1.0))
    ids = [e.id for p in t.pairs for e in p.endpoints]
    ejected = frozenset(i for i in ids if draw(st.integers(0, 5)) == 0)
    category = effective_limits(t, req).category
    outputs = {
        (p.family, category): draw(st.integers(1, 2000)) for p in t.pairs if draw(st.booleans())
    }
    # The bands above the class: their requests per second per pair, which lower its lines.
    above = {p.pair: draw(st.floats(0.0, 300.0)) for p in t.pairs if draw(st.booleans())}
    if exact:  # one margin for every pair, a power of two of milliseconds, read as set
        ms = draw(st.sampled_from([0, 0, 1, 16, 256, 1024]))
        margins = {p.pair: (ms / 1000.0, 0.0) for p in t.pairs} if ms else None
        seen = Seen(None, 0.0, margins, None, outputs, above)
    else:
        drawn = {p.pair: (draw(st.floats(0.0, 1.0)), 0.0) for p in t.pairs if draw(st.booleans())}
        seen = Seen(None, draw(st.floats(0.0, 3.0)), drawn, None, outputs, above)
    # Loads near each pair's line and sustainable concurrency, as the idle fleet has them.
    idle = fleet_of(t, req, HealthView(ejected), seen, share)
    rooms = {} if idle is None else {p.pair: p for p in idle.pairs}
    load: dict[str, float] = {}
    for p in t.pairs:
        room = rooms.get(p.pair)
        for e in p.endpoints:
            near = (
                st.integers(0, 30).map(float)
                if room is None
                else _near(room.per_endpoint, room.line)
            )
            load[e.id] = draw(near)
    if idle is not None and draw(st.booleans()):
        _to_the_press(draw, idle, share, load)
    return t, req, HealthView(ejected, load), seen, share


def _verdicts(case: Case) -> tuple[bool, RouteDecision | NoRoute, object, frozenset[str] | None]:
    """(whether the fast path serves it as decided, the decision, the full verdict, the
    fleet's pairs with room)."""
    t, req, health, seen, share = case
    result = choose_route(t, req, health, random.Random(1))
    fleet = fleet_of(t, req, health, seen, share)
    klass = ("standard", PriorityClass(share=share, sheddable=True))
    full = admit(t, req, health, result, klass, fleet)
    fast = False
    if isinstance(result, RouteDecision) and result.reason in _FEASIBLE:
        fast = Headroom().room_for(result.candidates[0], (t, req, health), (seen, share))
    return fast, result, full, None if fleet is None else fleet.with_room()


def _same(a: object, b: object) -> bool:
    if isinstance(a, Shed) or isinstance(b, Shed):
        return isinstance(a, Shed) and isinstance(b, Shed)
    if isinstance(a, RouteDecision) and isinstance(b, RouteDecision):
        return [c.pair.pair for c in a.candidates] == [c.pair.pair for c in b.candidates]
    return a == b


@_SETTINGS
@given(_case(exact=False))
def test_the_fast_path_gives_the_full_computations_verdict(case: Case) -> None:
    fast, result, full, _ = _verdicts(case)
    verdict = result if fast else full  # the decision step: the fleet only off the fast path
    assert _same(verdict, full)
    if fast:
        assert full is result  # served as decided, not reordered, not refused


@_SETTINGS
@given(_case(exact=True))
def test_where_its_bound_is_exact_the_fast_path_finds_every_room_the_full_one_does(
    case: Case,
) -> None:
    fast, result, _, room = _verdicts(case)
    if not isinstance(result, RouteDecision) or result.reason not in _FEASIBLE:
        return
    assert room is not None  # a feasible pair meets the request unloaded
    assert fast is (result.candidates[0].pair.pair in room)


def test_prompt_buckets_hold_the_prompt_and_are_exact_below_their_step() -> None:
    for chars in [*range(0, 300), 4095, 4096, 4097, 20_000, 123_457]:
        low, high = prompt_bucket(chars)
        assert low <= chars <= high
        assert (high - low) * 4 <= max(low, 1) or high == low
    assert [prompt_bucket(c) for c in range(8)] == [(c, c) for c in range(8)]
    assert prompt_bucket(8) == (8, 9)
    assert prompt_bucket(100) == (96, 111)


def test_margin_buckets_are_the_least_power_of_two_milliseconds_at_or_above() -> None:
    assert margin_bucket_ms(0.0) == 0
    assert margin_bucket_ms(0.0004) == 1
    assert margin_bucket_ms(0.004) == 4
    assert margin_bucket_ms(0.0041) == 8
    for ms in range(1, 3000, 7):
        assert margin_bucket_ms(ms / 1000.0) * 1e-3 >= ms / 1000.0
        assert margin_bucket_ms(ms / 1000.0) < 2 * ms


def test_a_model_whose_prediction_falls_as_the_prompt_grows_gets_no_bound() -> None:
    """A pair whose TTFT per input token falls below zero at some load breaks what the
    bound rests on: its model takes the full computation. A load curve that falls does not
    (the property tests above draw such curves)."""
    t = compile_table(table([entry("f", "q0"), entry("f", "q1", precision_rank=1)]))
    rows = t.scan_rows["f"]
    assert all(prompt_monotone(r.pair) for r in rows)
    per_input = list(rows[1].pair.ttft_per_input_by_load)
    per_input[2] = -1e-5
    bent = replace(rows[1].pair, ttft_per_input_by_load=tuple(per_input))
    assert not prompt_monotone(bent)
    broken = replace(t, scan_rows={**t.scan_rows, "f": (rows[0], rows[1]._replace(pair=bent))})
    req = RouteRequest(RequestFacts("f", "chat", 0.3, 100, 50), Budget(latency_s=5.0))
    headroom = Headroom()
    shape = headroom._shape(broken, req, HealthView(), Seen(None, 0.0))
    assert bound_of(broken, req, shape) is None
    assert bound_of(t, req, headroom._shape(t, req, HealthView(), Seen(None, 0.0)))


def test_a_pair_at_what_its_margin_lets_it_sustain_is_not_served_as_decided() -> None:
    """fam@a answers 100 tokens in 1.05 s + 0.11 s per request in flight: 8 meet a 2 s
    budget, 6 once its 0.2 s margin is taken off. With 6 in flight it is still the cheapest
    pair that meets the request (7 in 1.82 s), and the fleet is far from pressed (fam@b
    idle), but it is full: the fast path must leave it to the full computation, which
    prefers fam@b."""
    a = entry("fam", "a", ttft_per_input_token_s=0.0, ttft_per_load_s=0.01, tpot_per_load_s=0.001)
    b = entry("fam", "b", endpoints=2, input_usd_per_mtok=1.0, output_usd_per_mtok=4.0)
    t = compile_table(table([a, b]))
    req = RouteRequest(RequestFacts("fam", "chat", 0.3, 0, 100), Budget(latency_s=2.0))
    health = HealthView(load={"fam@a#0": 6.0})
    seen = Seen(None, 0.0, {"fam@a": (0.2, 0.0)})
    result = choose_route(t, req, health, random.Random(1))
    assert isinstance(result, RouteDecision)
    assert result.candidates[0].pair.pair == "fam@a"
    fleet = fleet_of(t, req, health, seen, 0.75)
    assert fleet is not None
    assert not fleet.pressed
    assert (fleet.pairs[0].pair, fleet.pairs[0].per_endpoint) == ("fam@a", 6.0)
    assert fleet.with_room() == {"fam@b"}
    assert not Headroom().room_for(result.candidates[0], (t, req, health), (seen, 0.75))
    health = HealthView(load={"fam@a#0": 5.0})  # one fewer: room below what it sustains
    result = choose_route(t, req, health, random.Random(1))
    assert isinstance(result, RouteDecision)
    assert Headroom().room_for(result.candidates[0], (t, req, health), (seen, 0.75))


class _Health:
    """A `HealthSource` whose loads the test sets."""

    def __init__(self) -> None:
        self.load: dict[str, float] = {}

    def view(self) -> HealthView:
        return HealthView(load=dict(self.load))

    def set_ladder(self, state: frozenset[tuple[str, str]]) -> None:
        pass

    def retry_after_s(self) -> float:
        return 1.0


def test_a_queued_request_judged_on_what_is_left_of_its_budget_keeps_no_bound() -> None:
    """Each wake-up of a queued request judges it on a budget of its own (what is left):
    a bound kept for it would be computed at every wake-up and never read again, and would
    push the bounds of real request shapes out of the memo. Its decision takes the fleet
    path instead; the same decision."""
    a = entry("fam", "a", ttft_per_input_token_s=0.0, ttft_per_load_s=0.01, tpot_per_load_s=0.001)
    b = entry("fam", "b", endpoints=2, input_usd_per_mtok=1.0, output_usd_per_mtok=4.0)
    b["latency"].update(ttft_per_input_token_s=0.0, ttft_per_load_s=0.01, tpot_per_load_s=0.001)
    store, health = TableStore(), _Health()
    store.swap(compile_table(table([a, b])))
    step = DecisionStep(
        StepParts(store, health, DataPlaneMetrics("t", "t"), random.Random(7), slots=LoadTracker())
    )
    raw = json.dumps(
        {"model": "fam", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}
    )
    headers = {"X-Latency-Budget-Ms": "2000", "X-Task-Category": "chat"}
    # 8 in flight everywhere: each pair sustains 8 (1.05 s + 0.11 s per request in flight).
    health.load = {"fam@a#0": 8.0, "fam@b#0": 8.0, "fam@b#1": 8.0}
    try:
        step.decide(Decidable(), raw.encode(), "chat", headers, may_wait=True)
        raise AssertionError("a full fleet queues the request")
    except Full as caught:
        full = caught
    # fam@a past standard's line (6) but below what it sustains on what is left (7 in 1.9 s),
    # fam@b idle: the fast path's case, on a budget of the request's own.
    health.load = {"fam@a#0": 6.0}
    assert step._headroom.kept == 0
    decided = Decidable()
    step.again(decided, full, 0.1)
    assert decided.decision.candidates[0].pair.pair == "fam@a"
    assert step._headroom.kept == 0
    step.finished(decided)
    fresh = Decidable()
    step.decide(fresh, raw.encode(), "chat", headers)  # a request of its own: kept
    assert fresh.decision.candidates[0].pair.pair == "fam@a"
    assert step._headroom.kept == 1


@st.composite
def _pair_case(
    draw: st.DrawFn,
) -> tuple[CompiledTable, Limits, tuple[int, int], tuple[float, float]]:
    t = draw(_table(bent=True))
    req = RouteRequest(
        RequestFacts("f", "chat", 0.3, 0, draw(st.integers(1, 1500))),
        Budget(
            latency_s=draw(st.floats(0.05, 30.0)), ttft_s=draw(st.none() | st.floats(0.02, 3.0))
        ),
    )
    longest = draw(st.integers(0, 20_000))
    margin = draw(st.floats(0.0, 2.0))
    shorter = (draw(st.integers(0, longest)), draw(st.floats(0.0, margin)))
    return t, effective_limits(t, req), (longest, shorter[0]), (margin, shorter[1])


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_pair_case())
def test_steady_load_is_a_floor_for_any_shorter_prompt_and_smaller_margin(
    case: tuple[CompiledTable, Limits, tuple[int, int], tuple[float, float]],
) -> None:
    """`capacity.steady_load` at a prompt and a margin never exceeds what the full
    computation finds at a shorter prompt and a smaller margin, load curves that fall
    included."""
    t, limits, (longest, chars), (margin, smaller) = case
    for p in t.pairs:
        floor = steady_load(p, limits, longest, margin)
        assert 1.0 <= floor <= fleet_sustainable(p, limits, longest, margin)
        assert floor <= fleet_sustainable(p, limits, chars, smaller)


def test_the_example_fleets_profiled_table_gets_a_bound() -> None:
    """The control plane's fit keeps each level's per-input slope non-negative and
    non-decreasing (`control_plane.build.fitting`): the table built from the example
    profiles is one admission's fast path holds on."""
    paths = sorted(Path(__file__).parents[3].joinpath("examples", "profiles").glob("*.json"))
    reports = [ProfileReport.model_validate_json(p.read_bytes()) for p in paths]
    t = compile_table(build_table(reports, Policy(), datetime(2026, 1, 1, tzinfo=UTC)))
    assert len(t.pairs) >= 4
    assert all(prompt_monotone(p) for p in t.pairs)
    req = RouteRequest(RequestFacts("auto", "chat", 0.3, 2000, 256), Budget(latency_s=20.0))
    bound = bound_of(t, req, Headroom()._shape(t, req, HealthView(), Seen(None, 0.0)))
    assert bound is not None
    assert bound.sustained >= 1.0


def test_a_pair_feasible_only_under_load_is_left_to_the_full_computation() -> None:
    """The example Hypothesis found (its database, 2026-12-07): f@q2's TTFT falls from 1.0 s
    at a load of 1 to 0.5 s at 2, so with one request in flight it meets a 1 s budget that
    it misses idle. `choose_route` chose it (the cheapest, feasible at its load now), but it
    is not in the request's fleet, and admission puts the fleet's pair with room (f@q1)
    first; the fast path served f@q2 as decided."""
    bent = entry("f", "q2", endpoints=2, input_usd_per_mtok=0.0, output_usd_per_mtok=0.0,
                 ttft_base_s=0.5, ttft_per_input_token_s=0.0, ttft_per_load_s=0.0,
                 tpot_base_s=0.015625, tpot_per_load_s=0.0, accuracy=1.0,
                 precision_rank=0)  # fmt: skip
    bent["latency"].update(
        max_profiled_load=3, load_levels=[1, 2, 3], ttft_load_s=[0.5, 0.0, 0.0],
        tpot_load_s=[0.0, 0.0, 0.0], ttft_rmse_load_s=[0.0] * 3, tpot_rmse_load_s=[0.0] * 3,
    )  # fmt: skip
    flat = entry("f", "q1", input_usd_per_mtok=0.0, output_usd_per_mtok=1.0, ttft_base_s=0.0,
                 ttft_per_input_token_s=0.0, ttft_per_load_s=0.0, tpot_base_s=0.015625,
                 tpot_per_load_s=0.0, accuracy=1.0, precision_rank=1)  # fmt: skip
    t = compile_table(table([bent, flat]))
    req = RouteRequest(RequestFacts("f", "chat", 0.3, 0, 1), Budget(latency_s=1.0))
    health = HealthView(frozenset({"f@q2#0"}), {"f@q2#1": 1.0, "f@q2#0": 0.0, "f@q1#0": 0.0})
    case = (t, req, health, Seen(None, 0.0, {}, None, {}), 0.25)
    fast, result, full, room = _verdicts(case)
    assert isinstance(result, RouteDecision)
    assert result.candidates[0].pair.pair == "f@q2"  # feasible at its load now
    assert room == frozenset({"f@q1"})  # the fleet: f@q2 misses the budget idle
    assert not fast
    assert isinstance(full, RouteDecision)
    assert full.candidates[0].pair.pair == "f@q1"
