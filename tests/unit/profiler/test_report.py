"""report: the document validates as ProfileReport, partial documents, files, tables."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from contracts.profile_report import Prices, ProfileReport
from profiler import PROFILER_VERSION
from profiler.errors import InputError
from profiler.reports.report import (
    build_document,
    load_report,
    output_usd_per_mtok,
    render_comparison,
    render_summary,
    validate_report,
    write_document,
)
from tests.unit.profiler.samples import FINISHED, measured, run_facts


def test_document_validates_as_profile_report_with_provenance() -> None:
    report = validate_report(build_document(run_facts(), measured(), FINISHED, partial=False))
    assert isinstance(report, ProfileReport)
    assert report.pair == "llama-3.1-8b@fp8"
    assert report.context_length == 8192
    assert report.chars_per_token == 3.9
    assert [s.concurrency for s in report.latency] == [1, 4]
    assert report.latency[0].ttft_s.n == 2
    prov = report.provenance
    assert (prov.engine, prov.engine_version) == ("vllm", "0.32.0")
    assert prov.eval_set_sha256 == "a" * 64
    assert prov.profiler_version == PROFILER_VERSION
    assert prov.git_sha == "b" * 40
    assert prov.partial is False
    assert prov.finished_at > prov.started_at
    assert report.memory.kv_cache_usage_ratio_max == 0.4


def test_document_round_trips_through_json() -> None:
    document = build_document(run_facts(), measured(), FINISHED, partial=False)
    again = ProfileReport.model_validate_json(json.dumps(document))
    assert again == validate_report(document)


def test_partial_document_is_marked_and_may_lack_sections() -> None:
    document = build_document(run_facts(), measured(latency=False), FINISHED, partial=True)
    assert document["provenance"]["partial"] is True
    assert document["latency"] == []
    with pytest.raises(InputError, match="latency"):
        validate_report(document)
    full = build_document(run_facts(), measured(), FINISHED, partial=True)
    assert validate_report(full).provenance.partial is True


def test_write_and_load_a_report_file(tmp_path: Path) -> None:
    path = tmp_path / "out" / "r.json"
    document = build_document(run_facts(), measured(), FINISHED, partial=False)
    write_document(path, document)
    assert load_report(path) == validate_report(document)
    assert [p.name for p in path.parent.iterdir()] == ["r.json"]  # no temp file left


def test_loading_a_bad_report_names_the_file_and_field(tmp_path: Path) -> None:
    document = build_document(run_facts(), measured(), FINISHED, partial=False)
    document["latency"][1]["ttft_s"]["p50"] = -1
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(document))
    with pytest.raises(InputError) as caught:
        load_report(path)
    assert f"{path}: latency[1].ttft_s.p50:" in str(caught.value)
    with pytest.raises(InputError, match="cannot read"):
        load_report(tmp_path / "missing.json")


def test_tokens_per_image_are_recorded_when_measured_and_left_out_when_not(
    tmp_path: Path,
) -> None:
    """The report carries `image_tokens` when the run measured it; a report without the field
    (every profile before it, or an engine that refused images) still loads, as None."""
    document = build_document(run_facts(), replace(measured(), image_tokens=1_500), FINISHED, False)
    assert document["image_tokens"] == 1_500
    path = tmp_path / "r.json"
    write_document(path, document)
    assert load_report(path).image_tokens == 1_500
    unmeasured = build_document(run_facts(), measured(), FINISHED, partial=False)
    assert "image_tokens" not in unmeasured
    write_document(path, unmeasured)
    assert load_report(path).image_tokens is None


@pytest.mark.parametrize("bad", [0, -576, 1.5, "576", True, 2_000_000])
def test_a_bad_image_tokens_figure_names_the_field(tmp_path: Path, bad: object) -> None:
    """Not a whole positive number of tokens (a float, a string, a bool, zero, past a
    million): the file's error names the field instead of routing on it."""
    document = build_document(run_facts(), measured(), FINISHED, partial=False)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({**document, "image_tokens": bad}))
    with pytest.raises(InputError) as caught:
        load_report(path)
    assert f"{path}: image_tokens:" in str(caught.value)


def test_output_price_is_explicit_or_derived_from_hourly_and_throughput() -> None:
    derived = validate_report(build_document(run_facts(), measured(), FINISHED, False))
    # 0.8 USD/h over the best 250 tok/s
    assert output_usd_per_mtok(derived) == pytest.approx(0.8 / (250 * 3600) * 1e6)
    priced = run_facts(prices=Prices(input_usd_per_mtok=0.1, output_usd_per_mtok=0.4))
    explicit = validate_report(build_document(priced, measured(), FINISHED, False))
    assert output_usd_per_mtok(explicit) == 0.4


def test_summary_table_shows_levels_quantiles_and_accuracy() -> None:
    report = validate_report(build_document(run_facts(), measured(), FINISHED, partial=True))
    text = render_summary(report)
    assert "llama-3.1-8b@fp8" in text
    assert "PARTIAL" in text
    assert "c=4 in=128 out=64" in text
    assert "55.0 / 59.5" in text  # TTFT p50 / p95 at c=1, in ms, of 50 and 60 ms
    assert "250.0" in text  # out tok/s
    assert "math" in text
    assert "0.600" in text
    assert "[0.400, 0.700]" in text


def test_comparison_has_one_row_per_pair_and_blank_for_unmeasured_categories() -> None:
    fp8 = validate_report(build_document(run_facts("fp8"), measured(), FINISHED, False))
    document = build_document(run_facts("bf16"), measured(), FINISHED, False)
    document["accuracy"] = document["accuracy"][:1]
    bf16 = validate_report(document)
    lines = render_comparison([fp8, bf16]).splitlines()
    assert lines[0].split()[:2] == ["pair", "TTFT"]
    rows = lines[2:]
    assert [r.split()[0] for r in rows] == ["llama-3.1-8b@bf16", "llama-3.1-8b@fp8"]
    assert rows[0].rstrip().endswith("-")  # bf16 has no math accuracy
    assert "0.750" in rows[1]  # mean of 0.9 and 0.6
