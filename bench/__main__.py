"""`python -m bench all [--quick]` and one command per section; writes RESULTS.md + JSON.

`all` writes bench/RESULTS.md and bench/results.json; single sections and `--quick` runs write
under bench/out/ so a smoke run never replaces the full report. Target misses are results,
not errors: the exit status is 1 only when a section could not run (or, with --strict, when
a target failed).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from bench.common import litellm_proxy
from bench.common.machine import Pinning, choose_pinning, read_facts, tool_version
from bench.common.targets import AB_ROWS
from bench.overhead.decision import run_decision_speed
from bench.overhead.hotspots import profile_data_plane
from bench.overhead.memory import run_memory
from bench.overhead.metric_cost import measure_metric_cost, metric_cost_note
from bench.overhead.section import OverheadSettings, run_overhead
from bench.overhead.timer_cost import measure_timer_cost, timer_cost_note
from bench.overhead.value_cost import measure_value_cost, value_cost_note
from bench.overhead.verdicts import decision_checks, memory_check, overhead_checks, uvloop_notes
from bench.report import BenchRun, write_report

SECTIONS = (
    "overhead",
    "decision",
    "quality",
    "memory",
    "replicas",
    "feedback",
    "floors",
    "hostile",
    "scale",
    "admission",
)
HERE = Path(__file__).parent


def _overhead(run: BenchRun, pinning: Pinning, workdir: Path) -> None:
    quick = OverheadSettings(
        targets=("direct", "minimal", "gearbox", *(ab.target for ab in AB_ROWS)),
        connections=(1, 64),
        rates_rps=(1000.0,),
        closed_s=2.0,
        open_s=2.0,
        warmup_s=1.0,
        repeats=2,
    )
    settings = quick if run.quick else OverheadSettings()
    run.overhead = run_overhead(settings, pinning, workdir / "overhead")
    run.checks += overhead_checks(run.overhead)
    run.notes += uvloop_notes(run.overhead)
    run.notes.append(metric_cost_note(measure_metric_cost(5_000 if run.quick else 50_000)))
    run.notes.append(timer_cost_note(measure_timer_cost(5_000 if run.quick else 50_000)))
    run.notes.append(value_cost_note(measure_value_cost(5_000 if run.quick else 50_000)))
    if run.quick:
        run.notes.append(
            "quick run: LiteLLM skipped, 2 s per load level, 1 and 64 connections, "
            "two closed-loop rounds instead of three"
        )
    try:
        run.hotspots = profile_data_plane(pinning, workdir / "hotspots", 3 if run.quick else 10)
    except (RuntimeError, OSError, subprocess.SubprocessError) as err:
        run.notes.append(f"no py-spy profile: {err}")


def _decision(run: BenchRun, pinning: Pinning, workdir: Path) -> None:
    run.decision = run_decision_speed(workdir / "decision", pinning.proxy, run.quick)
    run.checks += decision_checks(run.decision)


def _quality(run: BenchRun, pinning: Pinning, workdir: Path) -> None:
    from bench.quality.ladder_verdicts import ladder_checks
    from bench.quality.section import run_quality
    from bench.quality.verdicts import quality_checks

    run.quality = run_quality(pinning, workdir / "quality", run.quick)
    run.checks += quality_checks(run.quality)
    run.checks += ladder_checks(run.quality)


def _memory(run: BenchRun, pinning: Pinning, workdir: Path) -> None:
    n = 5_000 if run.quick else 100_000
    run.memory = run_memory(pinning, workdir / "memory", n)
    run.checks.append(memory_check(run.memory))


def _replicas(run: BenchRun, pinning: Pinning, workdir: Path) -> None:
    from bench.replicas.herding import run_herding
    from bench.replicas.section import run_replicas

    run.replicas = run_replicas(pinning, workdir / "replicas", run.quick)
    run.herding = run_herding(pinning, workdir / "herding", run.quick)


def _soak(run: BenchRun, pinning: Pinning, workdir: Path, duration_s: float) -> None:
    from bench.quality.verdicts import soak_checks
    from bench.soak.section import run_soak

    run.soak = run_soak(pinning, workdir / "soak", duration_s)
    run.checks += soak_checks(run.soak)


def _feedback(run: BenchRun, pinning: Pinning, workdir: Path) -> None:
    from bench.feedback.accuracy_drift import run_accuracy_drift
    from bench.feedback.report import accuracy_drift_checks, feedback_checks
    from bench.feedback.section import run_feedback

    run.feedback = run_feedback()
    run.checks += feedback_checks(run.feedback)
    run.accuracy_drift = run_accuracy_drift()
    run.checks += accuracy_drift_checks(run.accuracy_drift)


def _floors(run: BenchRun, pinning: Pinning, workdir: Path) -> None:
    from bench.floors.report import floor_checks
    from bench.floors.section import run_floor_scenario

    run.floors = run_floor_scenario(pinning, workdir / "floors", run.quick)
    run.checks += floor_checks(run.floors)


def _hostile(run: BenchRun, pinning: Pinning, workdir: Path) -> None:
    from bench.feedback.accuracy_drift import run_accuracy_drift
    from bench.feedback.section import run_feedback
    from bench.hostile.report import hostile_checks
    from bench.hostile.section import caught_from, run_hostile

    # A truly slowed engine and a true accuracy drop: section 5's and 5b's runs when this
    # bench run made them, else the same scenarios run now.
    feedback = run.feedback or run_feedback()
    drift = run.accuracy_drift or run_accuracy_drift()
    run.hostile = run_hostile(run.quick, caught_from(feedback, drift))
    run.checks += hostile_checks(run.hostile)


def _scale(run: BenchRun, pinning: Pinning, workdir: Path) -> None:
    from bench.scale.report import scale_checks
    from bench.scale.section import run_scale

    run.scale = run_scale(run.quick)
    run.checks += scale_checks(run.scale)
    if run.quick:
        run.notes.append(
            "quick scale run: 3 s per simulated fleet at 4 x 20, 16 x 100 and 64 x 200 only; "
            "table builds at 6 x 500 and 200 x 30,000 only"
        )


def _admission(run: BenchRun, pinning: Pinning, workdir: Path) -> None:
    from bench.admission.report import admission_checks
    from bench.admission.section import run_admission

    run.admission = run_admission(pinning, workdir, run.quick)
    run.checks += admission_checks(run.admission)


Section = Callable[[BenchRun, Pinning, Path], None]
_RUNNERS: dict[str, Section] = {
    "overhead": _overhead,
    "decision": _decision,
    "quality": _quality,
    "memory": _memory,
    "replicas": _replicas,
    "feedback": _feedback,
    "floors": _floors,
    "hostile": _hostile,
    "scale": _scale,
    "admission": _admission,
}


def _tools() -> dict[str, str]:
    return {
        "nginx": tool_version(["nginx", "-v"]),
        "wrk": tool_version(["wrk", "--version"]).split(" Copyright")[0],
        "taskset": tool_version(["taskset", "--version"]),
        "LiteLLM": f"litellm[proxy]=={litellm_proxy.LITELLM_VERSION} (own venv)",
    }


def _run_section(name: str, fn: Callable[[], None], run: BenchRun) -> None:
    print(f"==> bench {name}", flush=True)
    started = time.monotonic()
    try:
        fn()
    except (RuntimeError, OSError, ValueError, subprocess.SubprocessError) as err:
        run.errors[name] = f"{type(err).__name__}: {err}"
        print(f"    {name} failed: {err}", file=sys.stderr, flush=True)
    print(f"    {name} took {time.monotonic() - started:.0f} s", flush=True)


def report_dir(command: str, quick: bool, out_dir: Path | None) -> Path:
    """Where RESULTS.md and results.json go: `--out-dir` when given; bench/ itself for a full
    `all` run (`make bench` refreshes the committed report); bench/out/ for a single section or
    a `--quick` run, so a smoke run never replaces the full report."""
    if out_dir is not None:
        return out_dir
    return HERE if command == "all" and not quick else HERE / "out"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("command", choices=(*SECTIONS, "all", "soak"))
    parser.add_argument("--quick", action="store_true", help="seconds per section (smoke run)")
    parser.add_argument("--out-dir", type=Path, help="where RESULTS.md and results.json go")
    parser.add_argument("--duration-s", type=float, default=600.0, help="soak duration")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs)")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target fails")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    pinning = choose_pinning()
    out_dir = report_dir(args.command, args.quick, args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    command = "python -m bench " + " ".join(argv if argv is not None else sys.argv[1:])
    run = BenchRun(read_facts(pinning), command.strip(), args.quick, tools=_tools())
    workdir = Path(tempfile.mkdtemp(prefix="gearbox-bench-"))
    print(f"==> work folder {workdir}; {pinning.describe()}", flush=True)
    try:
        if args.command == "soak":
            duration = 20.0 if args.quick else args.duration_s
            _run_section("soak", lambda: _soak(run, pinning, workdir, duration), run)
        names = SECTIONS if args.command == "all" else (args.command,)
        for name in (n for n in names if n in _RUNNERS):
            runner = _RUNNERS[name]
            _run_section(name, lambda r=runner: r(run, pinning, workdir), run)  # type: ignore[misc]
    finally:
        write_report(run, out_dir / "RESULTS.md", out_dir / "results.json")
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    failed = [c.name for c in run.checks if not c.passed]
    print(
        f"==> wrote {out_dir / 'RESULTS.md'}: {len(run.checks) - len(failed)} of "
        f"{len(run.checks)} targets met",
        flush=True,
    )
    for name in failed:
        print(f"    missed: {name}", flush=True)
    if run.errors:
        return 1
    return 1 if args.strict and failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
