"""build_table: validation, ordering, ranks, baselines, pruning, determinism."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.policy import Policy, ShadowPolicy
from contracts.profile_report import ProfileReport
from contracts.routing_table import RoutingTable, compute_content_sha256
from control_plane.build.table import BuildError, build, build_table, report_sha256
from tests.unit.control_plane.factories import make_report, report_data

NOW = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
FAST = {"ttft": (0.01, 1e-5, 0.002), "tpot": (0.004, 5e-5)}
SLOW = {"ttft": (0.03, 3e-5, 0.006), "tpot": (0.009, 2e-4)}


def fleet() -> list[ProfileReport]:
    """Two families; f@int8 is dominated by f@fp8 (dearer, slower, less accurate)."""
    return [
        make_report("f", "fp16", hourly_usd=3.0, accuracy={"chat": 0.9, "code": 0.7}, **SLOW),
        make_report("f", "fp8", hourly_usd=2.0, accuracy={"chat": 0.88, "code": 0.69}, **FAST),
        make_report("f", "int8", hourly_usd=2.5, accuracy={"chat": 0.87, "code": 0.68}, **SLOW),
        make_report("g", "awq-int4", hourly_usd=6.0, accuracy={"chat": 0.95, "code": 0.8}),
    ]


def policy(**kw: Any) -> Policy:
    return Policy.model_validate({"categories": {"chat": {}, "code": {}}, **kw})


def test_builds_a_valid_stamped_table() -> None:
    table = build_table(fleet(), policy(), NOW)
    assert table.version == 0
    assert table.created_at == NOW
    assert table.content_sha256 == compute_content_sha256(table)
    assert RoutingTable.model_validate_json(table.model_dump_json()) == table
    assert table.categories == ("chat", "code")
    assert [s.pair for s in table.sources] == ["f@fp16", "f@fp8", "f@int8", "g@awq-int4"]
    entry = table.entry("f@fp8")
    assert entry is not None
    assert [e.id for e in entry.endpoints] == ["f@fp8#0"]
    assert entry.price_source == "derived"
    assert entry.accuracy == {"chat": 0.88, "code": 0.69}
    assert entry.accuracy_n == {"chat": 200, "code": 200}
    assert set(entry.utility) == {"chat", "code"}


def test_entries_are_ordered_by_reference_cost() -> None:
    table = build_table(fleet(), policy(), NOW)
    costs = [e.reference_cost_usd for e in table.entries]
    assert costs == sorted(costs)
    assert table.entries[0].pair == "f@fp8"
    first = table.entries[0]
    expected = first.cost_usd(512, 256)
    assert first.reference_cost_usd == pytest.approx(expected, rel=1e-8)


def test_cost_ties_break_on_latency_then_name() -> None:
    same_price = {"prices": (0.1, 0.4), "hourly_usd": None}
    reports = [
        make_report("f", "fp8-b-slow", **same_price, **SLOW),
        make_report("f", "fp8-a-fast", **same_price, **FAST),
        make_report("f", "fp8-c-fast", **same_price, **FAST),
    ]
    table = build_table(reports, policy(), NOW, prune=False)
    assert [e.pair for e in table.entries] == ["f@fp8-a-fast", "f@fp8-c-fast", "f@fp8-b-slow"]


def test_dominated_pairs_are_pruned_and_named() -> None:
    table = build_table(fleet(), policy(), NOW)
    assert table.entry("f@int8") is None
    assert [(p.pair, p.dominated_by) for p in table.pruned] == [("f@int8", "f@fp8")]
    kept_all = build_table(fleet(), policy(), NOW, prune=False)
    assert kept_all.entry("f@int8") is not None
    assert kept_all.pruned == ()


def test_baselines_and_shadow_pair_are_never_pruned() -> None:
    pinned = policy(baselines={"f": "f@int8"})
    table = build_table(fleet(), pinned, NOW)
    assert table.entry("f@int8") is not None
    assert table.baselines["f"] == "f@int8"
    shadow = policy(shadow={"enabled": True, "default_pair": "f@int8"})
    assert build_table(fleet(), shadow, NOW).entry("f@int8") is not None


def test_precision_ranks_and_default_baselines() -> None:
    table = build_table(fleet(), policy(), NOW, prune=False)
    ranks = {e.pair: e.precision_rank for e in table.entries}
    assert ranks == {"f@fp16": 0, "f@fp8": 1, "f@int8": 2, "g@awq-int4": 0}
    assert table.baselines == {"f": "f@fp16", "g": "g@awq-int4"}
    pruned = build_table(fleet(), policy(), NOW)  # ranks stay contiguous after pruning
    assert sorted(e.precision_rank for e in pruned.entries if e.family == "f") == [0, 1]


def test_explicit_prices_reach_the_entry() -> None:
    reports = [make_report("f", "fp16", prices=(0.2, 0.8), hourly_usd=None)]
    entry = build_table(reports, policy(), NOW).entries[0]
    assert (entry.input_usd_per_mtok, entry.output_usd_per_mtok) == (0.2, 0.8)
    assert entry.price_source == "explicit"


def test_latency_model_uses_the_policy_quantile() -> None:
    reports = [make_report("f", "fp16", ttft=(0.02, 0.0, 0.0), tpot=(0.01, 0.0))]
    p50 = build_table(reports, policy(latency_quantile=0.5), NOW).entries[0].latency
    p99 = build_table(reports, policy(latency_quantile=0.99), NOW).entries[0].latency
    assert p50.tpot_base_s == pytest.approx(0.01)
    assert p99.tpot_base_s == pytest.approx(0.015)  # the factory's p99 is 1.5 x p50
    assert p99.quantile == 0.99


@settings(max_examples=25, deadline=None)
@given(st.permutations(range(4)))
def test_report_order_does_not_change_the_table(order: list[int]) -> None:
    reports = fleet()
    reference = build_table(reports, policy(), NOW)
    shuffled = build_table([reports[i] for i in order], policy(), NOW)
    assert shuffled == reference


def test_hash_ignores_creation_time_but_not_content() -> None:
    a = build_table(fleet(), policy(), NOW)
    b = build_table(fleet(), policy(), datetime(2027, 1, 1, tzinfo=UTC))
    assert a.content_sha256 == b.content_sha256
    c = build_table(fleet(), policy(latency_quantile=0.99), NOW)
    assert c.content_sha256 != a.content_sha256


def test_identical_duplicates_merge() -> None:
    reports = fleet()
    assert build_table([*reports, reports[0]], policy(), NOW) == build_table(reports, policy(), NOW)


def test_mismatched_duplicates_are_rejected_by_pair() -> None:
    other = make_report("f", "fp16", hourly_usd=9.0)
    with pytest.raises(BuildError) as err:
        build_table([*fleet(), other], policy(), NOW)
    assert len(err.value.problems) == 1
    assert err.value.problems[0].startswith("report f@fp16: 2 different reports for one pair")


def test_partial_reports_are_rejected_unless_allowed() -> None:
    partial = make_report("h", "fp16", partial=True)
    with pytest.raises(BuildError) as err:
        build_table([*fleet(), partial], policy(), NOW)
    assert err.value.problems == [
        "report h@fp16: provenance.partial: the profiling run was interrupted; "
        "re-profile the pair or allow partial reports explicitly"
    ]
    table = build_table([*fleet(), partial], policy(), NOW, allow_partial=True)
    assert [s.partial for s in table.sources if s.pair == "h@fp16"] == [True]


def test_policy_naming_unknown_pairs_is_rejected_with_every_problem() -> None:
    bad = policy(
        baselines={"f": "f@nope", "g": "f@fp16"},
        shadow=ShadowPolicy(enabled=True, default_pair="z@fp16").model_dump(),
    )
    with pytest.raises(BuildError) as err:
        build_table(fleet(), bad, NOW)
    assert err.value.problems == [
        "policy: shadow.default_pair: 'z@fp16' is not a profiled pair",
        "policy: baselines.f: 'f@nope' is not a profiled pair",
        "policy: baselines.g: 'f@fp16' belongs to family 'f'",
    ]


def test_a_quantization_name_without_a_weight_format_is_a_build_error() -> None:
    """On 95376ca `exotic` ranked last as 0 bits with a warning, and `int4-fp8kv` ranked as
    fp8 (above the family's int8): now the first is refused naming the pair and the fix, and
    the second is int4, below int8."""
    with pytest.raises(BuildError) as err:
        build_table([*fleet(), make_report("f", "exotic")], policy(), NOW)
    (problem,) = err.value.problems
    assert problem.startswith("pair f@exotic: cannot read a weight format")
    assert "'exotic' declares no weight format" in problem
    assert "policy.precision_formats" in problem
    declared = policy(precision_formats={"exotic": "int2"})
    built = build_table([*fleet(), make_report("f", "exotic")], declared, NOW, prune=False)
    assert {e.pair: e.precision_format for e in built.entries}["f@exotic"] == "int2"
    kv = [*fleet(), make_report("f", "int4-fp8kv")]
    table = build_table(kv, policy(), NOW, prune=False)
    ranks = {e.pair: e.precision_rank for e in table.entries}
    formats = {e.pair: e.precision_format for e in table.entries}
    assert formats["f@int4-fp8kv"] == "int4"
    assert ranks["f@int4-fp8kv"] > ranks["f@int8"] > ranks["f@fp8"]


def test_unmeasured_categories_warn_and_count_as_zero() -> None:
    reports = [
        make_report("f", "fp16", accuracy={"chat": 0.9, "poetry": 0.5}),
        make_report("f", "fp8", accuracy={"chat": 0.8, "code": 0.6}),
    ]
    made = build(reports, policy(categories={"chat": {}, "code": {}, "math": {}}), NOW)
    assert made.warnings == (
        "category 'code': not measured by f@fp16; they count as accuracy 0 there",
        "category 'math': no pair measured it; all count as accuracy 0",
        "category 'poetry': measured but not in the policy; not routed on",
    )
    entry = made.table.entry("f@fp16")
    assert entry is not None
    assert "code" not in entry.accuracy
    assert entry.utility["code"] < made.table.entry("f@fp8").utility["code"]  # type: ignore[union-attr]


def test_no_reports_and_naive_times_are_rejected() -> None:
    with pytest.raises(BuildError, match="no profile reports"):
        build_table([], policy(), NOW)
    with pytest.raises(ValueError, match="timezone-aware"):
        build_table(fleet(), policy(), datetime(2026, 1, 1))


def test_report_sha256_ignores_unknown_fields() -> None:
    data = report_data()
    plain = ProfileReport.model_validate(data)
    extended = ProfileReport.model_validate({**data, "future_field": 1})
    assert report_sha256(plain) == report_sha256(extended)
