"""fleet: fleet files become one plan per pair; every problem is named by its field path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from profiler.errors import InputError
from profiler.run.fleet import load_fleet, parse_fleet
from profiler.run.profiling import builtin_evalsets

EXAMPLE = Path(__file__).parents[3] / "examples" / "fleet-profile.yaml"


def _fleet(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "defaults": {
            "hardware": {"name": "1x L4", "hourly_usd": 0.8},
            "load": {"concurrency": [1, 2], "input_tokens": [64], "output_tokens": [8]},
        },
        "pairs": [
            {
                "family": "gemma-3-270m",
                "quantization": "bf16",
                "served_model_name": "g-bf16",
                "endpoints": ["http://127.0.0.1:9001/"],
            }
        ],
    }
    data.update(changes)
    return data


def test_example_fleet_file_parses() -> None:
    fleet = load_fleet(EXAMPLE)
    assert [p.pair for p in fleet.plans] == [
        "gemma-3-270m@bf16",
        "gemma-3-270m@int8-w8a8",
        "gemma-3-270m@int4-w4a16",
    ]
    bf16, w8a8, w4a16 = fleet.plans
    assert {lv.concurrency for lv in bf16.sweep} == {1, 2, 4, 8}
    assert {lv.concurrency for lv in w8a8.sweep} == {1, 4, 8}  # per-pair override
    assert {lv.input_tokens for lv in w8a8.sweep} == {128, 512}  # the rest from defaults
    assert w4a16.prices is not None
    assert w4a16.prices.output_usd_per_mtok == 0.08
    assert bf16.evalsets == builtin_evalsets()
    assert bf16.out == EXAMPLE.parent / "../out/profiles/gemma-3-270m@bf16.json"
    assert fleet.plots_dir == EXAMPLE.parent / "../out/profiles/plots"


def test_pair_inherits_defaults_and_paths_resolve_against_the_file(tmp_path: Path) -> None:
    data = _fleet(out_dir="reports")
    data["pairs"][0]["evalsets"] = ["sets/mine.jsonl"]
    fleet = parse_fleet(data, "f.yaml", tmp_path)
    (plan,) = fleet.plans
    assert plan.endpoints == ("http://127.0.0.1:9001",)
    assert plan.hardware.name == "1x L4"
    assert plan.evalsets == (tmp_path / "sets/mine.jsonl",)
    assert plan.out == tmp_path / "reports" / "gemma-3-270m@bf16.json"
    assert len(plan.sweep) == 2
    assert fleet.parallel == 1


def test_unknown_keys_and_bad_values_are_named_by_path(tmp_path: Path) -> None:
    data = _fleet(paralel=2)
    data["defaults"]["hardware"]["hourly_ usd"] = 1
    data["pairs"][0]["load"] = {"concurrency": [0], "warmpu": 1}
    data["pairs"].append({"family": "Bad Name", "quantization": "fp8"})
    with pytest.raises(InputError) as caught:
        parse_fleet(data, "f.yaml", tmp_path)
    text = str(caught.value)
    assert "f.yaml: paralel: unknown field" in text
    assert "f.yaml: defaults.hardware.hourly_ usd: unknown field" in text
    assert "f.yaml: pairs[0].load.warmpu: unknown field" in text
    assert "f.yaml: pairs[1].family:" in text
    assert "f.yaml: pairs[1].served_model_name: Field required" in text


def test_sweep_and_price_problems_are_named_per_pair(tmp_path: Path) -> None:
    data = _fleet()
    data["defaults"]["hardware"] = {"name": "x"}  # no hourly price
    data["pairs"][0]["load"] = {"output_tokens": [1]}
    with pytest.raises(InputError) as caught:
        parse_fleet(data, "f.yaml", tmp_path)
    assert "f.yaml: pairs[0]: needs prices or hardware.hourly_usd" in str(caught.value)
    data["defaults"]["hardware"]["hourly_usd"] = 1.0
    with pytest.raises(InputError, match=r"pairs\[0\]: load.output_tokens: every value"):
        parse_fleet(data, "f.yaml", tmp_path)


def test_duplicate_pairs_and_missing_hardware(tmp_path: Path) -> None:
    data = _fleet()
    data["pairs"].append(dict(data["pairs"][0]))
    with pytest.raises(InputError, match="gemma-3-270m@bf16 is listed more than once"):
        parse_fleet(data, "f.yaml", tmp_path)
    del data["defaults"]["hardware"]
    with pytest.raises(InputError, match=r"pairs\[0\]: hardware: required"):
        parse_fleet(data, "f.yaml", tmp_path)


def test_unreadable_or_non_yaml_files(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read"):
        load_fleet(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("pairs: [\n")
    with pytest.raises(InputError, match=r"bad\.yaml: not valid YAML"):
        load_fleet(bad)
    bad.write_text("- a list\n")
    with pytest.raises(InputError, match=r"\(root\): must be a mapping"):
        load_fleet(bad)
