"""The page's pure parts: the frontier, the table view and the merge of live states."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.accuracy_bound import lower_bound, upper_bound
from contracts.live_state import BreakerState, DataPlaneState, EndpointState
from contracts.policy import load_policy
from contracts.profile_report import ProfileReport
from contracts.routing_table import RoutingTable
from control_plane.build.table import build_table
from control_plane.ui.live import merge_live_states
from control_plane.ui.view import entry_figures, pareto_front, pruned_sources, table_view
from tests.ui.stack import EXAMPLE_POLICY, example_reports

NOW = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
Point = tuple[float, float, float]


def _beats(b: Point, a: Point) -> bool:
    return b[0] <= a[0] and b[1] <= a[1] and b[2] >= a[2] and b != a


@pytest.mark.parametrize(
    ("points", "front"),
    [
        ({"a": (1.0, 1.0, 0.9)}, {"a"}),
        ({"cheap": (1.0, 2.0, 0.8), "good": (2.0, 2.0, 0.9)}, {"cheap", "good"}),
        ({"a": (1.0, 1.0, 0.9), "worse": (1.0, 1.0, 0.8)}, {"a"}),
        ({"a": (1.0, 1.0, 0.9), "twin": (1.0, 1.0, 0.9)}, {"a", "twin"}),
        ({"fast": (2.0, 0.5, 0.8), "cheap": (1.0, 3.0, 0.8), "dud": (2.0, 3.0, 0.8)},
         {"fast", "cheap"}),
        ({}, set()),
    ],
)  # fmt: skip
def test_pareto_front(points: dict[str, Point], front: set[str]) -> None:
    assert pareto_front(points) == front


_coord = st.floats(min_value=0, max_value=10, allow_nan=False)


@settings(deadline=None)  # a shared, loaded machine: no per-example time limit
@given(st.dictionaries(st.text(min_size=1, max_size=4), st.tuples(_coord, _coord, _coord)))
def test_front_members_are_unbeaten_and_the_rest_are_beaten(points: dict[str, Point]) -> None:
    front = pareto_front(points)
    for name, point in points.items():
        beaten = any(_beats(other, point) for o, other in points.items() if o != name)
        assert (name in front) is not beaten


def _example_table() -> tuple[RoutingTable, dict[str, ProfileReport]]:
    reports = {p: ProfileReport.model_validate(d) for p, d in example_reports().items()}
    policy = load_policy(yaml.safe_load(EXAMPLE_POLICY.read_text()))
    return build_table(list(reports.values()), policy, NOW), reports


def test_table_view_lists_pruned_pairs_without_figures_when_none_are_given() -> None:
    table, _ = _example_table()
    view = table_view(table, {})
    pruned = [p for p in view.pairs if p.status == "pruned"]
    assert [p.pair for p in pruned] == ["llama-3.1-8b-instruct@int8-w8a8"]
    assert pruned[0].categories == {}
    assert pruned[0].dominated_by == "llama-3.1-8b-instruct@fp8"
    assert view.notes
    assert "int8-w8a8" in view.notes[0]
    served = [p for p in view.pairs if p.status == "served"]
    assert [p.pair for p in served] == [e.pair for e in table.entries]
    assert {p.pair for p in served if p.baseline} == {
        "llama-3.1-8b-instruct@fp16",
        "llama-3.1-70b-instruct@fp8",
    }
    assert all(set(p.categories) == set(view.categories) for p in served)


def test_table_view_draws_pruned_pairs_but_keeps_them_off_the_frontier() -> None:
    table, reports = _example_table()
    full = build_table(list(reports.values()), table.policy, NOW, prune=False)
    entries = [e for e in full.entries if e.pair in pruned_sources(table)]
    assert len(entries) == 1
    view = table_view(table, {e.pair: entry_figures(e) for e in entries})
    pruned = next(p for p in view.pairs if p.status == "pruned")
    assert set(pruned.categories) == set(view.categories)
    assert not any(c.frontier for c in pruned.categories.values())
    assert all(c.utility is None for c in pruned.categories.values())
    assert view.notes == []


def test_table_view_carries_intervals_and_counts() -> None:
    table, _ = _example_table()
    view = table_view(table, {})
    assert view.floor_confidence == 0.9
    assert view.min_eval_items == 20
    assert view.fleet_baseline == "llama-3.1-70b-instruct@fp8"
    awq = next(p for p in view.pairs if p.pair == "llama-3.1-8b-instruct@awq-int4")
    chat = awq.categories["chat"]
    assert (chat.right, chat.n) == (246, 300)
    assert chat.bound == pytest.approx(lower_bound(246, 300, 0.9))
    assert chat.upper == pytest.approx(upper_bound(246, 300, 0.9))
    assert chat.bound is not None
    assert chat.upper is not None
    assert chat.bound < chat.accuracy < chat.upper


def _state(
    instance: str,
    breakers: dict[str, BreakerState],
    at: datetime = NOW,
    version: int | None = 3,
    requests: dict[str, int] | None = None,
) -> DataPlaneState:
    return DataPlaneState(
        instance=instance,
        table_version=version,
        updated_at=at,
        endpoints=tuple(
            EndpointState(endpoint_id=e, pair=e.split("#")[0], breaker=b, in_flight=1)
            for e, b in breakers.items()
        ),
        requests_by_pair=requests or {},
    )


def test_merge_takes_the_worst_breaker_and_sums_traffic() -> None:
    states = [
        _state("b", {"f@q#0": "closed", "f@q#1": "half_open"}, requests={"f@q": 2}),
        _state("a", {"f@q#0": "open", "f@q#1": "closed"}, version=2, requests={"f@q": 5}),
    ]
    live = merge_live_states(states, 3, NOW + timedelta(seconds=4))
    assert [i.instance for i in live.instances] == ["a", "b"]
    assert [i.stale for i in live.instances] == [True, False]
    assert [i.age_s for i in live.instances] == [4.0, 4.0]
    by_id = {e.endpoint_id: e for e in live.endpoints}
    assert by_id["f@q#0"].breaker == "open"
    assert by_id["f@q#1"].breaker == "half_open"
    assert by_id["f@q#0"].breakers == {"a": "open", "b": "closed"}
    assert by_id["f@q#0"].in_flight == 2
    assert live.requests_by_pair == {"f@q": 7}


def test_merge_keeps_the_newest_state_of_an_instance_and_accepts_naive_times() -> None:
    old = _state("a", {"f@q#0": "open"}, at=NOW - timedelta(seconds=30))
    new = _state("a", {"f@q#0": "closed"}, at=NOW.replace(tzinfo=None))
    live = merge_live_states([old, new], None, NOW, unreadable=2)
    assert len(live.instances) == 1
    assert live.instances[0].stale is False
    assert live.endpoints[0].breaker == "closed"
    assert live.unreadable_states == 2


def test_merge_of_nothing() -> None:
    live = merge_live_states([], 1, NOW)
    assert live.instances == []
    assert live.endpoints == []
    assert live.requests_by_pair == {}
