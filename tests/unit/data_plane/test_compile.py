"""compile.py: prices per token, aliases in cost order, more-precise chain, policy defaults."""

from __future__ import annotations

import pytest

from data_plane.decision.compile import compile_table
from data_plane.domain import BudgetMode, CategoryDefaults
from tests.unit.data_plane.tables import entry, fleet, table


def test_pairs_keep_cost_order_and_flatten_prices_and_latency() -> None:
    t = fleet()
    assert [p.pair for p in t.pairs] == [
        "llama@awq-int4",
        "qwen@int8-w8a8",
        "llama@fp8",
        "llama@bf16",
        "qwen@bf16",
    ]
    assert [p.order for p in t.pairs] == [0, 1, 2, 3, 4]
    awq = t.pairs[0]
    assert awq.input_usd_per_token == pytest.approx(0.1e-6)
    assert awq.output_usd_per_token == pytest.approx(0.4e-6)
    assert awq.tpot_base_s == 0.008
    assert awq.ttft_per_input_token_s == 0.0001
    assert [e.id for e in awq.endpoints] == [f"llama@awq-int4#{i}" for i in range(3)]
    assert awq.endpoints[0].url.startswith("http://10.0.0.1")
    assert awq.accuracy["chat"] == 0.78
    assert awq.served_model_name == "served-llama-awq-int4"


def test_aliases() -> None:
    t = fleet()
    names = {alias: [p.pair for p in pairs] for alias, pairs in t.by_alias.items()}
    assert names["auto"] == [p.pair for p in t.pairs]
    assert names["llama"] == ["llama@awq-int4", "llama@fp8", "llama@bf16"]
    assert names["qwen"] == ["qwen@int8-w8a8", "qwen@bf16"]
    assert names["llama@fp8"] == ["llama@fp8"]
    assert len(names) == 1 + 2 + 5


def test_more_precise_is_the_next_rank_of_the_family() -> None:
    t = fleet()
    more = {k: v.pair for k, v in t.more_precise.items()}
    assert more == {
        "llama@awq-int4": "llama@fp8",
        "llama@fp8": "llama@bf16",
        "qwen@int8-w8a8": "qwen@bf16",
    }


def test_more_precise_skips_missing_ranks_and_prefers_cheaper_on_ties() -> None:
    t = compile_table(
        table(
            [
                entry("m", "bf16", input_usd_per_mtok=0.5, precision_rank=0),
                entry("m", "fp8", input_usd_per_mtok=0.3, precision_rank=1),
                entry("m", "int8", input_usd_per_mtok=0.2, precision_rank=1),
                entry("m", "int4", input_usd_per_mtok=0.1, precision_rank=3),
            ]
        )
    )
    assert t.more_precise["m@int4"].pair == "m@int8"  # rank 1, cheaper than m@fp8
    assert t.more_precise["m@fp8"].pair == "m@bf16"
    assert "m@bf16" not in t.more_precise


def test_baselines_default_to_the_most_precise_pair() -> None:
    t = fleet()
    assert {f: p.pair for f, p in t.baselines.items()} == {
        "llama": "llama@bf16",
        "qwen": "qwen@bf16",
    }


def test_explicit_baselines_win() -> None:
    t = compile_table(
        table(
            [entry("m", "bf16"), entry("m", "fp8", precision_rank=1, input_usd_per_mtok=0.01)],
            baselines={"m": "m@fp8"},
        )
    )
    assert t.baselines["m"].pair == "m@fp8"


def test_policy_defaults_per_category() -> None:
    t = fleet(
        policy={
            "budget_mode": "strict",
            "default_category": "code",
            "categories": {
                "code": {"min_accuracy": 0.8, "latency_budget_s": 5, "typical_output_tokens": 400},
                "chat": {"ttft_budget_s": 0.5},
            },
        }
    )
    assert t.default_mode is BudgetMode.STRICT
    assert t.default_category == "code"
    assert t.categories["code"] == CategoryDefaults(0.8, 5.0, None, 400)
    assert t.categories["chat"] == CategoryDefaults(0.0, None, 0.5, 256)
    # categories the table lists but the policy does not get neutral defaults
    assert t.categories["math"] == CategoryDefaults(0.0, None, None, 256)


def test_version_hash_and_policy_carried() -> None:
    rt = table([entry("m", "bf16")], version=7, policy={"canary_fraction": 0.25})
    t = compile_table(rt)
    assert t.version == 7
    assert t.content_sha256 == rt.content_sha256
    assert t.policy.canary_fraction == 0.25


def test_compiled_table_is_read_only() -> None:
    t = fleet()
    with pytest.raises(TypeError):
        t.by_alias["x"] = ()  # type: ignore[index]
    with pytest.raises(TypeError):
        t.pairs[0].accuracy["chat"] = 1.0  # type: ignore[index]


def test_scan_rows_mirror_the_aliases_with_every_figure_flat() -> None:
    t = fleet()
    assert set(t.scan_rows) == set(t.by_alias)
    for alias, pairs in t.by_alias.items():
        assert [row.pair for row in t.scan_rows[alias]] == list(pairs)
    row = t.scan_rows["llama@awq-int4"][0]
    awq = t.pairs[0]
    assert row.order == awq.order == 0
    assert row.endpoint_ids == tuple(e.id for e in awq.endpoints)
    assert row.swapped == awq.endpoints[::-1]
    assert (row.chars_per_token, row.context_length) == (awq.chars_per_token, awq.context_length)
    assert (row.input_usd_per_token, row.output_usd_per_token) == (
        awq.input_usd_per_token,
        awq.output_usd_per_token,
    )
    assert (row.ttft_base_s, row.ttft_per_input_token_s, row.ttft_per_load_s) == (
        awq.ttft_base_s,
        awq.ttft_per_input_token_s,
        awq.ttft_per_load_s,
    )
    assert (row.tpot_base_s, row.tpot_per_load_s) == (awq.tpot_base_s, awq.tpot_per_load_s)


def test_accuracy_by_category_is_aligned_with_the_pairs() -> None:
    t = fleet()
    assert set(t.accuracy_by_category) == set(t.categories)
    for category, values in t.accuracy_by_category.items():
        assert values == tuple(p.accuracy.get(category, 0.0) for p in t.pairs)
    assert t.accuracy_by_category["extraction"][4] == 0.0  # qwen@bf16 never measured it


def test_cost_floors_are_the_extremes_of_the_rows_that_follow() -> None:
    t = fleet()
    for alias, rows in t.scan_rows.items():
        floors = t.cost_floors[alias]
        assert len(floors) == len(rows)
        for k, floor in enumerate(floors):
            later = rows[k:]
            assert floor.max_chars_per_token == max(r.chars_per_token for r in later)
            assert floor.min_input_usd_per_token == min(r.input_usd_per_token for r in later)
            assert floor.min_output_usd_per_token == min(r.output_usd_per_token for r in later)
            extremes = floor[:3]
            assert all(f[:3] == extremes for f in floors[k : floor.next_change])
            assert floor.next_change == len(rows) or floors[floor.next_change][:3] != extremes
