"""The operator page's per-priority and per-tenant rows: the data plane's tenant counters in
its live state, summed over instances by the control plane (pure, no I/O)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from contracts.live_state import ClassCounters, DataPlaneState
from control_plane.ui.live import merge_live_states
from data_plane.decision.compile import compile_table
from data_plane.resilience.endpoint_load import LoadTracker
from data_plane.sync.live_state import build_state
from data_plane.table_store import TableStore
from data_plane.telemetry.flow_metrics import Refusal
from data_plane.telemetry.metrics import DataPlaneMetrics
from data_plane.telemetry.traffic import TrafficStats
from tests.unit.data_plane.tables import entry, table

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def test_the_live_state_carries_the_tenant_counters_by_tenant_and_by_class() -> None:
    metrics = DataPlaneMetrics("test", "test")
    requests, shed = metrics.tenant("team-a", "batch")
    requests.inc(4)
    shed.inc(1)
    metrics.tenant("team-a", "critical")[0].inc(2)
    metrics.tenant("other", "batch")[0].inc(3)
    metrics.tenant_budget_outcomes.labels("team-a", "critical", "met").inc(2)
    metrics.tenant_budget_outcomes.labels("other", "batch", "missed").inc(1)
    metrics.tenant_cost.labels("team-a", "batch").inc(0.25)
    store = TableStore()
    store.swap(compile_table(table([entry("a", "int4")])), 0.0)
    state = build_state(
        "dp-0", store, LoadTracker(), lambda _: "closed", TrafficStats(), 0.0,
        metrics.tenant_totals(),
    )  # fmt: skip
    assert state.tenants["team-a"] == ClassCounters(requests=6, shed=1, budget_met=2, cost_usd=0.25)
    assert state.priorities["batch"] == ClassCounters(
        requests=7, shed=1, budget_missed=1, cost_usd=0.25
    )
    assert state.priorities["critical"] == ClassCounters(requests=2, budget_met=2)


def test_the_page_sums_every_instance_per_class_and_tenant() -> None:
    a = DataPlaneState(
        instance="a",
        updated_at=NOW,
        priorities={"batch": ClassCounters(requests=10, shed=2, budget_met=6, budget_missed=2)},
        tenants={"team-a": ClassCounters(requests=10, shed=2, cost_usd=1.0)},
    )
    b = DataPlaneState(
        instance="b",
        updated_at=NOW,
        priorities={"batch": ClassCounters(requests=10, shed=0, budget_met=10)},
        tenants={"team-a": ClassCounters(requests=10, cost_usd=0.5)},
    )
    live = merge_live_states([a, b], 3, NOW)
    (batch,) = live.priorities
    assert (batch.name, batch.requests, batch.shed) == ("batch", 20, 2)
    assert batch.shed_rate == pytest.approx(0.1)
    assert batch.budget_attainment == pytest.approx(16 / 18)
    (tenant,) = live.tenants
    assert tenant.name == "team-a"
    assert tenant.cost_usd == pytest.approx(1.5)


def test_the_live_state_carries_the_queue_by_class_and_tenant_and_the_page_sums_it() -> None:
    """The flow-control counters (docs/data_plane.md, "Flow control"): requests that had to
    wait per tenant and class; per class those waiting now and refusals by reason."""
    metrics = DataPlaneMetrics("test", "test")
    metrics.tenant("team-a", "batch")[0].inc(5)
    flow = metrics.flow
    flow.entered.labels("team-a", "batch").inc(3)
    flow.waiting("batch", 2)
    flow.left("batch", 0.4, Refusal.DEADLINE)
    store = TableStore()
    store.swap(compile_table(table([entry("a", "int4")])), 0.0)
    state = build_state(
        "dp-0", store, LoadTracker(), lambda _: "closed", TrafficStats(), 0.0,
        metrics.tenant_totals(),
    )  # fmt: skip
    assert state.tenants["team-a"] == ClassCounters(requests=5, queued=3)
    assert state.priorities["batch"] == ClassCounters(
        requests=5, queued=3, waiting=2, queue_refused={"deadline": 1}
    )
    other = state.model_copy(
        update={"instance": "dp-1", "priorities": {"batch": ClassCounters(
            queued=1, queue_refused={"deadline": 1, "queue_full": 2})}},
    )  # fmt: skip
    (batch,) = merge_live_states([state, other], 1, NOW).priorities
    assert (batch.queued, batch.waiting) == (4, 2)
    assert batch.queue_refused == {"deadline": 2, "queue_full": 2}
