"""check_sampling.py: which demoted pairs a request may probe, one client's share of a pair's
checks, and the pace of probes; compile.py's `demoted`."""

from __future__ import annotations

from typing import Any

from contracts.routing_table import stamp_table
from data_plane.checks.check_sampling import (
    ClientShares,
    ClientSpend,
    ProbeSlots,
    probe_targets,
)
from data_plane.decision.compile import compile_table
from data_plane.domain import CompiledTable
from tests.unit.data_plane.tables import entry, table


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _demotion(accuracy: float) -> dict[str, Any]:
    return {
        "profile_accuracy": accuracy,
        "profile_bound": None,
        "checks": 100,
        "agreed": 50,
        "base_version": 1,
    }


def demoted(demotions: dict[str, dict[str, Any]]) -> CompiledTable:
    """llama in bf16 / fp8 / awq-int4 and qwen in bf16 only, with `demotions` in force."""
    entries = [
        entry("llama", "bf16", input_usd_per_mtok=0.3, accuracy=0.9),
        entry("llama", "fp8", input_usd_per_mtok=0.2, accuracy=0.86, precision_rank=1),
        entry("llama", "awq-int4", input_usd_per_mtok=0.1, accuracy=0.78, precision_rank=2),
        entry("qwen", "bf16", input_usd_per_mtok=0.35, accuracy=0.92),
    ]
    data = table(entries).model_dump(mode="python")
    data["demotions"] = demotions
    return compile_table(stamp_table(data))


def test_compile_lists_the_demoted_pairs_per_category_in_cost_order() -> None:
    t = demoted(
        {
            "llama@fp8": {"math": _demotion(0.86)},
            "llama@awq-int4": {"math": _demotion(0.78), "extraction": _demotion(0.78)},
        }
    )
    assert {c: [p.pair for p in ps] for c, ps in t.demoted.items()} == {
        "math": ["llama@awq-int4", "llama@fp8"],
        "extraction": ["llama@awq-int4"],
    }
    assert demoted({}).demoted == {}


def test_probe_targets_are_the_demoted_pairs_the_request_could_go_to() -> None:
    t = demoted(
        {
            "llama@fp8": {"math": _demotion(0.86)},
            "llama@awq-int4": {"math": _demotion(0.78)},
            "qwen@bf16": {"math": _demotion(0.92)},  # its own reference: nothing to compare
        }
    )

    def names(alias: str, category: str, served: str) -> list[str]:
        return [p.pair for p in probe_targets(t, alias, category, served)]

    assert names("auto", "math", "llama@bf16") == ["llama@awq-int4", "llama@fp8"]
    assert names("llama", "math", "llama@fp8") == ["llama@awq-int4"]  # its own answer: a check
    assert names("qwen", "math", "qwen@bf16") == []  # the model field rules llama out
    assert names("llama@bf16", "math", "llama@bf16") == []
    assert names("auto", "extraction", "llama@bf16") == []


def test_one_client_gets_its_share_and_anonymous_requests_are_not_capped() -> None:
    clock = Clock()
    shares = ClientShares(clock)
    key = (3, "llama@fp8", "math")
    assert [shares.admit(key, "steer", 0.1) for _ in range(3)] == [True, False, False]
    assert all(shares.admit(key, None, 0.1) for _ in range(15))  # 16 taken
    assert shares.admit(key, "steer", 0.1)  # 2 <= 0.1 x 17 + 1
    assert not shares.admit(key, "steer", 0.1)
    assert shares.admit((3, "llama@fp8", "extraction"), "steer", 0.1)  # its own count
    assert shares.admit((4, "llama@fp8", "math"), "steer", 0.1)  # a new table version
    clock.now += 3600.0
    assert shares.admit(key, "steer", 0.1)  # a new hour


def test_one_client_spends_at_most_its_share_of_the_check_dollars() -> None:
    """A $1 budget at share 0.1: a client's reserved and settled spend stays within $0.10, a
    check dearer than that is never sent for it, anonymous requests are not capped."""
    clock = Clock()
    spend = ClientSpend(clock)
    assert [spend.reserve("long", 0.04, 0.1) for _ in range(3)] == [True, True, False]
    assert spend.reserve("short", 0.001, 0.1)  # another client: its own share
    spend.settle("long", 0.04, 0.01)  # the check cost less than its worst case
    assert spend.reserve("long", 0.04, 0.1)  # 0.04 + 0.01 + 0.04 <= 0.1
    assert not spend.reserve("long", 0.02, 0.1)
    spend.settle("long", 0.04, 0.0)  # a reservation never sent
    assert spend.reserve("long", 0.02, 0.1)
    assert not spend.reserve("huge", 0.2, 0.1)  # no one-check allowance in dollars
    assert all(spend.reserve(None, 0.2, 0.1) for _ in range(10))
    clock.now += 3600.0
    assert spend.reserve("long", 0.09, 0.1)  # a new hour


def test_probes_of_a_pair_and_category_are_an_interval_apart() -> None:
    clock = Clock()
    t = demoted(
        {"llama@fp8": {"math": _demotion(0.86)}, "llama@awq-int4": {"math": _demotion(0.78)}}
    )
    int4, fp8 = t.demoted["math"]
    slots = ProbeSlots(clock, 2.0)
    assert slots.first_open((int4, fp8), "math") is int4
    slots.take(int4.pair, "math")
    assert slots.first_open((int4, fp8), "math") is fp8  # the next pair's slot is open
    slots.take(fp8.pair, "math")
    assert slots.first_open((int4, fp8), "math") is None
    assert slots.first_open((int4,), "extraction") is int4  # per category
    clock.now += 2.0
    assert slots.first_open((int4, fp8), "math") is int4
    assert ProbeSlots(clock, 0.0).first_open((int4,), "math") is None  # off
