"""decision/fair_share.py: each tenant's share of a saturated pair, work-conserving."""

from __future__ import annotations

import pytest

from data_plane.decision.compile import compile_table
from data_plane.decision.fair_share import over_fair_share
from data_plane.decision.feasibility import predict
from data_plane.domain import Candidate, HealthView
from data_plane.resilience.tenant_load import TenantLoad
from tests.unit.data_plane.tables import entry, table

ENDPOINT = "a@int4#0"  # profiled up to 64 at once (tests.support.routing_tables)


def candidate() -> Candidate:
    pair = compile_table(table([entry("a", "int4")])).pairs[0]
    return predict(pair, pair.endpoints, 800, 50, {})


def over(load: float, tenant: str, tenants: dict[str, int]) -> bool:
    health = HealthView(load={ENDPOINT: load})
    return over_fair_share(candidate(), health, tenant, tenants) is not None


def test_below_saturation_no_tenant_is_limited() -> None:
    assert not over(63, "a", {"a": 62, "b": 1})


def test_at_saturation_a_tenant_past_an_equal_share_is_limited_the_others_are_not() -> None:
    tenants = {"a": 40, "b": 24}  # share 64 / 2 = 32 each
    assert over(64, "a", tenants)
    assert not over(64, "b", tenants)
    assert not over(64, "newcomer", tenants)  # 64 / 3 each; it holds none


def test_work_conserving_idle_tenants_take_no_share() -> None:
    assert not over(64, "a", {"a": 64})  # alone at the pair: nobody to protect
    # Tenant c sent earlier but has nothing in flight: a and b split 64, 32 each (with c
    # counted a would be limited at 21).
    assert not over(64, "a", {"a": 30, "b": 34})
    assert over(64, "b", {"a": 30, "b": 34})


def test_a_replica_divides_only_its_part_of_the_pair() -> None:
    # This replica holds 32 of the 64 in flight: its part is 32, 16 per tenant.
    tenants = {"a": 30, "b": 2}
    assert over(64, "a", tenants)
    assert not over(64, "b", tenants)


def test_the_retry_after_is_the_time_to_fall_back_under_the_share() -> None:
    found = over_fair_share(candidate(), HealthView(load={ENDPOINT: 64}), "a", {"a": 40, "b": 24})
    assert found is not None
    assert (found.held, found.share) == (40, 32)
    w = candidate().predicted_latency_s
    assert found.retry_after_s == pytest.approx(9 * w / 40)


def test_tenant_load_keeps_only_tenants_in_flight() -> None:
    load = TenantLoad()
    for _ in range(3):
        load.start("p", "a")
    load.start("p", "b")
    assert dict(load.at("p")) == {"a": 3, "b": 1}
    load.end("p", "b")
    load.end("p", "ghost")  # never started: ignored
    assert dict(load.at("p")) == {"a": 3}
    for _ in range(3):
        load.end("p", "a")
    assert dict(load.at("p")) == {}
