"""plots: both PNGs are written from reports (Agg canvas, no display)."""

from __future__ import annotations

from pathlib import Path

from profiler.reports.plots import write_plots
from profiler.reports.report import build_document, validate_report
from tests.unit.profiler.samples import FINISHED, measured, run_facts

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_latency_and_accuracy_cost_plots_are_pngs(tmp_path: Path) -> None:
    reports = [
        validate_report(build_document(run_facts(q), measured(), FINISHED, False))
        for q in ("fp8", "bf16")
    ]
    paths = write_plots(reports, tmp_path / "plots")
    assert [p.name for p in paths] == ["latency.png", "accuracy_cost.png"]
    for path in paths:
        data = path.read_bytes()
        assert data.startswith(PNG_MAGIC)
        assert len(data) > 5_000
