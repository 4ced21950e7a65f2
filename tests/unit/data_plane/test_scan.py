"""The scan's shortcuts are the reference arithmetic: per-load steps tabulated at compile time
give `load_terms` exactly, every candidate's figures are `predict`'s, and a bounded scan stops
where a row-by-row cost-floor check does, and the rest of a bounded scan, read as far as the
chain's next candidates need, gives the chain one pass over every row gives
(data_plane/decision/scan.py)."""

from __future__ import annotations

import itertools
import math
import random
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from data_plane.decision.choose import choose_route, effective_limits, predict
from data_plane.decision.compile import compile_table
from data_plane.decision.feasibility import Limits, floor_column
from data_plane.decision.scan import Rest, SeededOnUse, scan
from data_plane.domain import (
    Budget,
    CompiledTable,
    HealthView,
    RequestFacts,
    RouteDecision,
    RouteRequest,
    load_terms,
)
from tests.unit.data_plane.tables import CATEGORIES, entry, table

_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
_terms = st.floats(0.0, 0.5)


@st.composite
def _leveled_entry(draw: st.DrawFn, i: int) -> dict[str, Any]:
    """A pair whose latency model has per-level terms (load, prompt cost and error per level),
    as the control plane fits them since issue 22; or, sometimes, the straight line only."""
    e = entry(
        draw(st.sampled_from(["f", "g"])),
        f"q{i}",
        endpoints=draw(st.integers(1, 3)),
        chars_per_token=draw(st.floats(2.0, 5.0)),
        input_usd_per_mtok=draw(st.floats(0.0, 5.0)),
        output_usd_per_mtok=draw(st.floats(0.0, 20.0)),
        ttft_base_s=draw(st.floats(0.0, 1.0)),
        ttft_per_input_token_s=draw(st.floats(0.0, 1e-3)),
        ttft_per_load_s=draw(st.floats(0.0, 0.2)),
        tpot_base_s=draw(st.floats(0.001, 0.05)),
        tpot_per_load_s=draw(st.floats(0.0, 0.01)),
        accuracy={c: draw(st.floats(0.0, 1.0)) for c in CATEGORIES},
    )
    levels = sorted(draw(st.sets(st.integers(1, 12), min_size=1, max_size=5)))
    latency = e["latency"]
    latency["max_profiled_load"] = levels[-1]
    if draw(st.booleans()):
        n = len(levels)
        latency.update(
            ttft_rmse_s=draw(_terms),
            load_levels=levels,
            ttft_load_s=draw(st.lists(_terms, min_size=n, max_size=n)),
            tpot_load_s=draw(st.lists(st.floats(0.0, 0.01), min_size=n, max_size=n)),
            ttft_per_input_load_s=draw(st.lists(st.floats(0.0, 3e-3), min_size=n, max_size=n)),
            ttft_rmse_load_s=draw(st.lists(_terms, min_size=n, max_size=n)),
            tpot_rmse_load_s=draw(st.lists(st.floats(0.0, 0.01), min_size=n, max_size=n)),
        )
    return e


@st.composite
def _tables(draw: st.DrawFn) -> CompiledTable:
    n = draw(st.integers(1, 6))
    return compile_table(table([draw(_leveled_entry(i)) for i in range(n)]))


# A load as the data plane sees one: whole counts mostly, fractions, and loads beyond the
# profiled range.
_loads = st.one_of(st.integers(0, 16).map(float), st.floats(0.0, 16.0))


@_SETTINGS
@given(_tables(), st.lists(_loads, min_size=1, max_size=8), st.integers(0, 20_000))
def test_load_steps_give_load_terms_exactly(
    t: CompiledTable, loads: list[float], tokens: int
) -> None:
    for row in t.scan_rows["auto"]:
        pair = row.pair
        assert len(row.load_steps) == len(pair.ttft_by_load) - 1
        for load in loads:
            at = load + 1.0
            f = int(at)
            if f >= len(row.load_steps):
                continue  # the scan calls load_terms itself there
            w = at - f
            t0, dt, i0, di, p0, dp = row.load_steps[f]
            assert (t0 + dt * w + (i0 + di * w) * tokens, p0 + dp * w) == load_terms(
                pair, at, tokens
            )


@st.composite
def _health(draw: st.DrawFn, t: CompiledTable) -> HealthView:
    ids = sorted(e.id for p in t.pairs for e in p.endpoints)
    return HealthView(
        open_endpoints=frozenset(draw(st.lists(st.sampled_from(ids), max_size=3))),
        load={i: draw(_loads) for i in ids if draw(st.booleans())},
    )


def _request(chars: int, out: int, latency_s: float | None, floor: float = 0.0) -> RouteRequest:
    facts = RequestFacts(
        alias="auto", category="chat", complexity=0.5, input_chars=chars, max_output_tokens=out
    )
    return RouteRequest(facts, Budget(latency_s=latency_s, min_accuracy=floor))


@_SETTINGS
@given(
    st.data(),
    _tables(),
    st.integers(0, 30_000),
    st.integers(1, 2000),
    st.none() | st.floats(0.1, 30.0),
)
def test_every_candidate_carries_predicts_figures(
    data: st.DataObject, t: CompiledTable, chars: int, out: int, latency_s: float | None
) -> None:
    """The whole chain (the scanned head and the rows `Rest` finishes later): tokens, TTFT,
    latency, cost and load are `predict`'s for the pair at its first endpoint, bit for bit."""
    health = data.draw(_health(t))
    result = choose_route(t, _request(chars, out, latency_s), health, random.Random(5))
    if not isinstance(result, RouteDecision):
        return
    for c in result.candidates:
        p = predict(c.pair, c.endpoints, chars, out, health.load)
        assert (c.input_tokens, c.predicted_ttft_s, c.predicted_latency_s) == (
            p.input_tokens,
            p.predicted_ttft_s,
            p.predicted_latency_s,
        )
        assert (c.estimated_cost_usd, c.load) == (p.estimated_cost_usd, p.load)


def _row_by_row_stop(t: CompiledTable, limits: Limits, chars: int, health: HealthView) -> int:
    """Where a scan checking every row's cost floor against the cheapest feasible pair found
    before it stops: the same draws (an unbounded scan draws as a bounded one does, in row
    order), the floors read one position at a time."""
    rows, floors = t.scan_rows["auto"], t.cost_floors["auto"]
    accuracy = floor_column(t, limits)
    _, feasible, _ = scan(rows, None, accuracy, limits, chars, health, random.Random(3))
    cost_at = {i: cost for cost, _, i, *_ in feasible}
    out, best = limits.output_tokens, math.inf
    for k, row in enumerate(rows):
        cpt, in_usd, out_usd, _ = floors[k]
        if best < math.inf and math.ceil(chars / cpt) * in_usd + out * out_usd > best:
            return k
        best = min(best, cost_at.get(row.order, math.inf))
    return len(rows)


@_SETTINGS
@given(
    st.data(),
    _tables(),
    st.integers(0, 30_000),
    st.integers(1, 2000),
    st.none() | st.floats(0.1, 30.0),
    st.floats(0.0, 0.9),
)
def test_a_bounded_scan_stops_where_a_row_by_row_floor_check_does(
    data: st.DataObject,
    t: CompiledTable,
    chars: int,
    out: int,
    latency_s: float | None,
    floor: float,
) -> None:
    health = data.draw(_health(t))
    limits = effective_limits(t, _request(chars, out, latency_s, floor))
    rows, floors = t.scan_rows["auto"], t.cost_floors["auto"]
    accuracy = floor_column(t, limits)
    stop, feasible, missed = scan(rows, floors, accuracy, limits, chars, health, random.Random(3))
    assert stop == _row_by_row_stop(t, limits, chars, health)
    _, all_feasible, all_missed = scan(
        rows, None, accuracy, limits, chars, health, random.Random(3)
    )
    before = {row.order for row in rows[:stop]}
    assert feasible == [f for f in all_feasible if f[2] in before]
    assert missed == [m for m in all_missed if m[2] in before]


@given(st.integers(0, 2**64 - 1))
def test_an_rng_seeded_on_use_draws_what_one_seeded_at_once_draws(seed: int) -> None:
    """The rest of a bounded scan seeds its rng on its first draw (seeding costs ~4 us and
    most completions never draw); its draws are those of `random.Random(seed)`."""
    at_once, on_use = random.Random(seed), SeededOnUse(seed)
    assert [on_use.random() for _ in range(3)] == [at_once.random() for _ in range(3)]
    assert SeededOnUse(seed).getrandbits(64) == random.Random(seed).getrandbits(64)
    items, same = list(range(10)), list(range(10))
    SeededOnUse(seed).shuffle(items)
    random.Random(seed).shuffle(same)
    assert items == same


@_SETTINGS
@given(
    st.data(),
    _tables(),
    st.integers(0, 30_000),
    st.integers(1, 2000),
    st.none() | st.floats(0.1, 30.0),
    st.floats(0.0, 0.9),
    st.integers(2, 4),
)
def test_the_chain_read_lazily_is_the_chain_completed_at_once(
    data: st.DataObject,
    t: CompiledTable,
    chars: int,
    out: int,
    latency_s: float | None,
    floor: float,
    ahead: int,
) -> None:
    """The candidates after the head, read one at a time as the proxy reads them (the next
    one for every attempt with an allowance, `Proxy._following`), are the chain that one
    pass over every row gives, endpoint order (the rng's draws) included; so are the whole
    chain and the rejections read after them."""
    health = data.draw(_health(t))
    req = _request(chars, out, latency_s, floor)
    seed = data.draw(st.integers(0, 2**32))
    lazy = choose_route(t, req, health, random.Random(seed))
    eager = choose_route(t, req, health, random.Random(seed))
    if not isinstance(lazy, RouteDecision) or not isinstance(eager, RouteDecision):
        return
    n = len(eager.candidates)  # asks for every row: the rest scanned in one pass
    whole = tuple(eager.candidates)
    assert len(whole) == n
    assert tuple(itertools.islice(lazy.candidates, ahead)) == whole[:ahead]
    assert tuple(lazy.candidates) == whole
    assert lazy.rejected == eager.rejected


def _rising(n: int) -> CompiledTable:
    """`n` pairs, each dearer than the one before, every one feasible."""
    return compile_table(
        table([entry("f", f"q{i}", input_usd_per_mtok=0.1 * (i + 1)) for i in range(n)])
    )


def _rest(t: CompiledTable, req: RouteRequest) -> tuple[Rest, int]:
    """The `Rest` of `choose_route`'s bounded scan of `t`, and where that scan stopped."""
    limits = effective_limits(t, req)
    rows, floors = t.scan_rows["auto"], t.cost_floors["auto"]
    accuracy, health, rng = floor_column(t, limits), HealthView(), random.Random(1)
    chars = req.facts.input_chars
    scanned = scan(rows, floors, accuracy, limits, chars, health, rng)
    return Rest(rows, floors, accuracy, limits, chars, scanned, health, rng), scanned[0]


def test_the_next_candidate_does_not_work_out_the_whole_chain() -> None:
    """Eight pairs in cost order: the bounded scan stops after the cheapest; the chain's
    first two rows need the second pair only, and come back without the six after it."""
    t = _rising(8)
    req = _request(2000, 100, None)
    rest, stop = _rest(t, req)
    assert stop == 1
    first_two = rest.leading(2)
    assert [row[3].pair for row in first_two] == ["f@q0", "f@q1"]
    feasible, _ = _rest(t, req)[0].complete()
    assert len(feasible) == 8
    assert first_two == feasible[:2]
    assert rest.leading(8) == feasible
