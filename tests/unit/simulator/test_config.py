"""Fleet files: the example loads; bad files fail naming the file and the field path."""

from __future__ import annotations

from pathlib import Path

import pytest

from demo.profiling import HOLDOUT
from simulator.config import FleetConfigError, SimPairConfig, load_fleet, parse_fleet

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "sim-fleet.yaml"
PAIR = {"name": "m", "family": "llama-3.1-8b-instruct", "quantization": "fp16",
        "ttft_base_s": 0.01, "tpot_base_s": 0.001}  # fmt: skip


def test_example_fleet_is_realistic() -> None:
    fleet = load_fleet(EXAMPLE)
    by_quant = {(p.family, p.quantization): p for p in fleet.pairs}
    small = [
        by_quant[("llama-3.1-8b-instruct", q)] for q in ("fp16", "fp8", "int8-w8a8", "awq-int4")
    ]
    big = by_quant[("llama-3.1-70b-instruct", "awq-int4")]
    tpots = [p.tpot_base_s for p in small]
    assert max(tpots) == tpots[0], "fp16 decodes slowest"
    assert min(tpots) == tpots[-1], "awq-int4 decodes fastest"
    for category in ("chat", "extraction", "code", "math", "reasoning"):
        accs = [p.accuracy_for(category) for p in small]
        assert accs == sorted(accs, reverse=True), category
        assert big.accuracy_for(category) > accs[0]
    fp16, int4 = small[0], small[-1]
    for category in ("code", "math"):
        assert fp16.accuracy_for(category) - int4.accuracy_for(category) >= 0.1
    assert big.tpot_base_s > fp16.tpot_base_s


def test_example_fleet_knows_every_item_the_demo_scores_on() -> None:
    """The demo replays the held-out sets (code items with tests included) on this fleet: an
    item it does not know is answered with filler, wrong on every pair whatever its accuracy."""
    keys = {path.resolve() for path in load_fleet(EXAMPLE).answer_keys}
    assert {path.resolve() for path in HOLDOUT} <= keys


def test_defaults_match_the_interface() -> None:
    pair = SimPairConfig.model_validate(PAIR)
    assert (pair.port, pair.max_running, pair.max_queue, pair.context_length) == (0, 8, 256, 4096)
    assert (pair.chars_per_token, pair.default_max_tokens, pair.jitter_ratio) == (4.0, 16, 0.0)
    assert pair.accuracy_for("anything") == 0.5
    assert pair.faults.error_status == 503
    assert pair.faults.break_after_chunks == 1


@pytest.mark.parametrize(
    ("pairs", "expected"),
    [
        ([{**PAIR, "faults": {"eror_rate": 0.5}}], "pairs[0].faults.eror_rate"),
        ([PAIR, {**PAIR, "name": "n", "ttft_base_s": -1}], "pairs[1].ttft_base_s"),
        ([{**PAIR, "accuracy": {"code": 1.5}}], "pairs[0].accuracy.code"),
        ([{k: v for k, v in PAIR.items() if k != "tpot_base_s"}], "pairs[0].tpot_base_s"),
        ([{**PAIR, "quantization": "FP 16"}], "pairs[0].quantization"),
        ([{**PAIR, "colour": "red"}], "pairs[0].colour"),
        ([PAIR, PAIR], "pair names must be distinct"),
        ([], "pairs"),
    ],
)
def test_bad_fleet_names_the_field_path(pairs: list[dict[str, object]], expected: str) -> None:
    with pytest.raises(FleetConfigError) as info:
        parse_fleet({"pairs": pairs}, "fleet.yaml")
    assert expected in str(info.value)
    assert str(info.value).startswith("fleet.yaml: ")


def test_bad_files_name_the_file(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("pairs: [\n")
    with pytest.raises(FleetConfigError, match=r"broken\.yaml: \(file\): not valid YAML"):
        load_fleet(broken)
    listing = tmp_path / "list.json"
    listing.write_text("[1, 2]")
    with pytest.raises(FleetConfigError, match=r"list\.json: \(root\): must be a mapping"):
        load_fleet(listing)
    with pytest.raises(FleetConfigError, match="cannot read"):
        load_fleet(tmp_path / "missing.yaml")


def test_answer_keys_resolve_against_the_fleet_file(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(
        "answer_keys: [keys/a.jsonl, /abs/b.jsonl]\n"
        "pairs:\n  - {name: m, family: f, quantization: q, ttft_base_s: 0, tpot_base_s: 0}\n"
    )
    fleet = load_fleet(path)
    assert fleet.answer_keys == [tmp_path / "keys" / "a.jsonl", Path("/abs/b.jsonl")]
    assert fleet.pair("m").name == "m"
    with pytest.raises(KeyError, match="known"):
        fleet.pair("other")
