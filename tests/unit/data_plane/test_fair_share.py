"""decision/fair_share.py: each active tenant's share of a contended fleet, work-conserving;
a tenant refused lately still counts as active."""

from __future__ import annotations

from dataclasses import replace

import pytest

from data_plane.decision.fair_share import ACTIVE_S, lent_past_shares, over_fair_share
from data_plane.resilience.tenant_load import MAX_REFUSED, TenantLoad
from tests.unit.data_plane.admission_fleet import FP16, INT4, fleet, seen


def over(
    tenant: str,
    tenants: dict[str, dict[str, int]],
    load: dict[str, float] | None = None,
    refused: dict[str, dict[str, float]] | None = None,
    now: float = 0.0,
) -> bool:
    """Whether `tenant` is over its share; the load defaults to what `tenants` hold."""
    if load is None:
        load = {f"{p}#0": float(sum(t.values())) for p, t in tenants.items()}
    found = fleet(load, tenants, share=1.0)  # 8 a pair, 16 in all
    assert found is not None
    return over_fair_share(found, tenant, seen(tenants, refused, now), 0.39) is not None


# The bursty tenant holds 11 of the 14 in flight, across both pairs; the steady one 3, on int4.
HOLDING = {"fam@int4": {"bursty": 4, "steady": 3}, "fam@fp16": {"bursty": 7}}


def test_a_steady_tenant_is_protected_under_a_burst() -> None:
    # 8 each for two tenants: 2 free, the steady tenant may still ask 5: the bursty one is
    # refused, the steady one and a newcomer are not.
    assert over("bursty", HOLDING)
    assert not over("steady", HOLDING)
    assert not over("newcomer", HOLDING)  # 16 / 3 each; it holds none


def test_the_fleet_is_shared_not_the_one_pair_chosen() -> None:
    # fp16 holds only the bursty tenant; it is still limited there by what it holds on int4.
    tenants = {"fam@int4": {"bursty": 2, "steady": 5}, "fam@fp16": {"bursty": 7}}
    assert over("bursty", tenants)


def test_within_its_share_a_tenant_is_never_refused_here() -> None:
    assert not over("bursty", {"fam@int4": {"bursty": 7}, "fam@fp16": {"steady": 8}})
    assert over("bursty", {"fam@int4": {"bursty": 8}, "fam@fp16": {"steady": 1}})


def test_a_lone_tenant_gets_the_whole_fleet() -> None:
    alone = {"fam@int4": {"bursty": 7}, "fam@fp16": {"bursty": 7}}
    assert not over("bursty", alone)


def test_a_tenant_refused_lately_counts_as_active_and_then_fades() -> None:
    """Issue 32, finding 2: a light tenant refused by a full fleet had nothing in flight and
    so took no share; the bulk tenant refilled every slot that freed. Refused lately, it now
    counts: the bulk tenant, holding 14 of 16, is held to its half."""
    bulk = {"fam@int4": {"bulk": 7}, "fam@fp16": {"bulk": 7}}
    refused = {"fam@int4": {"light": 0.0}}
    assert over("bulk", bulk, refused=refused, now=ACTIVE_S)
    assert not over("bulk", bulk, refused=refused, now=ACTIVE_S + 0.1)
    assert not over("light", bulk, refused=refused)  # its own refusal does not count


def test_more_active_tenants_than_slots_fill_the_fleet_not_one_slot() -> None:
    """With more tenants asking than the fleet holds requests (20 on 16 slots), each share is
    under one request. A tenant holding nothing was then over its share whenever anything was
    in flight, so the fleet served about one request at a time and refused the rest (the
    bench's bulk tenant over 12 names: 1.2 of 7 slots busy). A fractional share reserves no
    slot: the fleet fills to its capacity, and past it every tenant is refused."""
    refused = {"fam@int4": {f"t{i}": 0.0 for i in range(20)}}
    busy = {"fam@int4": {"t0": 1}, "fam@fp16": {"t1": 1}}  # no idle endpoint
    assert not over("newcomer", busy, refused=refused)
    full = {
        "fam@int4": {f"t{i}": 1 for i in range(8)},
        "fam@fp16": {f"t{i}": 1 for i in range(8, 16)},
    }
    assert over("newcomer", full, refused=refused)
    assert over("t0", full, refused=refused)


def test_a_tenant_past_its_share_takes_a_slot_only_past_the_others_whole_shares() -> None:
    # Three active tenants on 16: shares of 5.33, whole shares of 5. "c" holds none and keeps
    # 5 slots free; "a" past its share may take the 16 - 5 - 10 = 1 slot beyond them, once.
    refused = {"fam@int4": {"c": 0.0}}
    assert not over("a", {"fam@int4": {"a": 5}, "fam@fp16": {"b": 5}}, refused=refused)
    assert over("a", {"fam@int4": {"a": 6}, "fam@fp16": {"b": 5}}, refused=refused)
    assert not over("c", {"fam@int4": {"a": 6}, "fam@fp16": {"b": 5}}, refused=refused)


def test_a_replica_divides_only_its_part_of_the_fleet() -> None:
    # 15 in flight, 6 of them this replica's: its part is 7 / 16 of 16, 3.5 per tenant.
    tenants = {"fam@int4": {"a": 5, "b": 1}}
    load = {INT4: 8.0, FP16: 7.0}
    assert over("a", tenants, load)
    assert not over("b", tenants, load)


def test_the_retry_after_is_the_time_to_fall_back_under_the_share() -> None:
    found = fleet({INT4: 7.0, FP16: 7.0}, HOLDING, share=1.0)
    assert found is not None
    verdict = over_fair_share(found, "bursty", seen(HOLDING), 0.39)
    assert verdict is not None
    assert (verdict.held, verdict.share) == (11, 8)
    assert verdict.retry_after_s == pytest.approx(4 * 0.39 / 11)  # 4 of its 11 must finish


def test_tenant_load_keeps_only_tenants_in_flight() -> None:
    load = TenantLoad()
    for _ in range(3):
        load.start("p", "a")
    load.start("p", "b")
    assert dict(load.at("p")) == {"a": 3, "b": 1}
    assert {p: dict(t) for p, t in load.by_pair().items()} == {"p": {"a": 3, "b": 1}}
    assert not load.alone("a")
    load.end("p", "b")
    load.end("p", "ghost")  # never started: ignored
    assert dict(load.at("p")) == {"a": 3}
    assert load.alone("a")
    for _ in range(3):
        load.end("p", "a")
    assert dict(load.at("p")) == {}
    assert load.alone("anyone")


def test_tenant_load_remembers_refusals_for_a_while_and_boundedly() -> None:
    now = [0.0]
    load = TenantLoad(lambda: now[0])
    load.refused("p", "light")
    assert not load.alone("bulk")
    assert load.alone("light")
    now[0] = ACTIVE_S + 0.5
    assert load.alone("bulk")
    for i in range(MAX_REFUSED + 10):
        load.refused("p", f"t{i}")
    assert len(load.refusals()["p"]) == MAX_REFUSED
    assert "light" not in load.refusals()["p"]  # older than ACTIVE_S: gone


def lent(tenant: str, tenants: dict[str, dict[str, int]]) -> float:
    load = {f"{p}#0": float(sum(t.values())) for p, t in tenants.items()}
    found = fleet(load, tenants, share=1.0)  # 8 a pair, 16 in all
    assert found is not None
    return lent_past_shares(found, tenant, seen(tenants))


def test_what_others_hold_past_their_shares_is_lent_to_a_tenant_within_its_own() -> None:
    # 16 for two tenants: 8 each; the bursty one holds 11, 3 past its share.
    assert lent("steady", HOLDING) == 3
    assert lent("bursty", HOLDING) == 0  # past its own share: nothing lent
    # A newcomer: 16 / 3 each; the bursty tenant holds 11 - 5.33 past it, the steady none.
    assert lent("newcomer", HOLDING) == pytest.approx(11 - 16 / 3)
    assert lent("bursty", {"fam@int4": {"bursty": 7}}) == 0  # alone: no line to lend past


def test_what_is_lent_fills_past_the_class_line_never_past_the_sustainable_load() -> None:
    # Standard fills 6 of the 8 a pair sustains while the fleet is pressed.
    at_line = fleet({INT4: 6.0, FP16: 6.0})
    assert at_line is not None
    assert at_line.pressed
    assert at_line.full
    assert replace(at_line, lent=1.0).with_room() == {"fam@int4", "fam@fp16"}
    at_eight = fleet({INT4: 8.0, FP16: 7.0})
    assert at_eight is not None
    assert replace(at_eight, lent=5.0).with_room() == {"fam@fp16"}  # int4 sustains 8
