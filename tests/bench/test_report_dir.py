"""bench/__main__.py: `make bench` (`python -m bench all`) rewrites the committed bench/RESULTS.md;
smoke runs and single sections write under bench/out/ (docs/benchmarks.md)."""

from __future__ import annotations

from pathlib import Path

from bench.__main__ import build_parser, report_dir

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _dir(argv: list[str]) -> Path:
    args = build_parser().parse_args(argv)
    return report_dir(args.command, args.quick, args.out_dir).resolve()


def test_a_full_run_writes_the_committed_report() -> None:
    assert _dir(["all"]) == BENCH
    assert (BENCH / "RESULTS.md").is_file()


def test_smoke_runs_and_single_sections_write_under_bench_out() -> None:
    assert _dir(["all", "--quick"]) == BENCH / "out"
    assert _dir(["hostile"]) == BENCH / "out"
    assert _dir(["soak"]) == BENCH / "out"


def test_out_dir_wins(tmp_path: Path) -> None:
    assert _dir(["all", "--out-dir", str(tmp_path)]) == tmp_path.resolve()
