"""decision/fair_share.py: each tenant's share of an overloaded fleet, work-conserving."""

from __future__ import annotations

import pytest

from data_plane.decision.fair_share import over_fair_share
from data_plane.resilience.tenant_load import TenantLoad
from tests.unit.data_plane.admission_fleet import BURST, FP16, INT4, ONE_X, fleet

FULLISH = {INT4: 7.0, FP16: 7.0}  # room on both pairs: the budget alone sheds nothing here


def over(tenant: str, tenants: dict[str, dict[str, int]], offered: float = BURST) -> bool:
    found = fleet(FULLISH, offered, tenants)
    assert found is not None
    return over_fair_share(found, tenant, tenants) is not None


# The bursty tenant holds 11 of the 14 in flight, across both pairs; the steady one 3, on int4.
HOLDING = {"fam@int4": {"bursty": 4, "steady": 3}, "fam@fp16": {"bursty": 7}}


def test_a_steady_tenant_is_protected_under_a_burst() -> None:
    # The fleet sustains 16 in flight within the 400 ms budget (8 a pair, not the profiled
    # 64): 8 each for two tenants. The bursty tenant is past it, the steady one is not.
    assert over("bursty", HOLDING)
    assert not over("steady", HOLDING)
    assert not over("newcomer", HOLDING)  # 16 / 3 each; it holds none


def test_the_fleet_is_shared_not_the_one_pair_chosen() -> None:
    # fp16 holds only the bursty tenant; it is still limited there by what it holds on int4.
    tenants = {"fam@int4": {"bursty": 2, "steady": 5}, "fam@fp16": {"bursty": 7}}
    assert over("bursty", tenants)


def test_nobody_is_limited_without_overload() -> None:
    assert not over("bursty", HOLDING, offered=ONE_X)


def test_work_conserving_idle_tenants_take_no_share() -> None:
    alone = {"fam@int4": {"bursty": 7}, "fam@fp16": {"bursty": 7}}
    assert not over("bursty", alone)  # alone in the fleet: nobody to protect
    # A tenant that sent earlier but has nothing in flight takes no share: a and b split 16,
    # 8 each (with a third counted, a would be limited at 5.3).
    assert not over("a", {"fam@int4": {"a": 7, "b": 2}, "fam@fp16": {"b": 5}})
    assert not over("a", {"fam@int4": {"a": 6, "b": 3}, "fam@fp16": {"b": 5}})


def test_a_replica_divides_only_its_part_of_the_fleet() -> None:
    # 14 in flight, 6 of them this replica's: its part is 7 / 15 of 16, 3.7 per tenant.
    tenants = {"fam@int4": {"a": 5, "b": 1}}
    assert over("a", tenants)
    assert not over("b", tenants)


def test_the_retry_after_is_the_time_to_fall_back_under_the_share() -> None:
    found = fleet(FULLISH, BURST, HOLDING)
    assert found is not None
    verdict = over_fair_share(found, "bursty", HOLDING)
    assert verdict is not None
    assert (verdict.held, verdict.share) == (11, 8)
    # int4 at 7 with this request: 0.15 + 0.03 x 8 = 0.39 s; 4 of its 11 must finish.
    assert verdict.retry_after_s == pytest.approx(4 * 0.39 / 11)


def test_tenant_load_keeps_only_tenants_in_flight() -> None:
    load = TenantLoad()
    for _ in range(3):
        load.start("p", "a")
    load.start("p", "b")
    assert dict(load.at("p")) == {"a": 3, "b": 1}
    assert {p: dict(t) for p, t in load.by_pair().items()} == {"p": {"a": 3, "b": 1}}
    load.end("p", "b")
    load.end("p", "ghost")  # never started: ignored
    assert dict(load.at("p")) == {"a": 3}
    for _ in range(3):
        load.end("p", "a")
    assert dict(load.at("p")) == {}
