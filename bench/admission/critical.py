"""The 3x burst's critical class alone, over several seeds' schedules (issue 32): `python -m
bench.admission.critical [--seconds 15] [--seeds 23 24 25 26 27] [--router-tree DIR]`.

Runs the section's burst scenario (`bench.admission.burst`) with flow control as shipped, one
fresh router per seed, and prints the critical requests of the burst windows per seed and in
all with their 95% Clopper-Pearson interval, each miss's cause (`bench.admission.misses`),
the steady tenant's attainment, late refusals and the CPU waits. `--router-tree` runs the
router from another source tree (its PYTHONPATH), e.g. main's, so that two trees can be
alternated on one loaded machine with the same clients and engines. About `seconds` + 3 s
per seed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.admission import burst as b
from bench.admission.misses import cause
from bench.admission.report import critical_lines, late_refusals
from bench.admission.stack import TRUSTED
from bench.common.machine import choose_pinning


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--seeds", type=int, nargs="+", default=[b.SEED, *b.MORE_SEEDS])
    parser.add_argument("--router-tree", type=Path, default=None)
    parser.add_argument("--misses", action="store_true", help="print each critical miss")
    args = parser.parse_args()
    env = {} if args.router_tree is None else {"PYTHONPATH": str(args.router_tree.resolve())}
    if args.router_tree is not None:
        print(f"router tree: {args.router_tree.resolve()} ({_data_plane_of(env)})", flush=True)
    plans = [("flow control", TRUSTED, seed) for seed in args.seeds]
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="gearbox-critical-") as workdir:
        runs = asyncio.run(
            b.run_bursts(Path(workdir), choose_pinning().proxy, args.seconds, plans, env)
        )
    samples = [s for run in runs for s in run.samples]
    late = late_refusals(samples)
    refusals = sum(s.status == 429 for s in samples)
    print(f"router tree: {args.router_tree or 'this one'}; load average before: {load}")
    print(f"load average after: {os.getloadavg()}; {refusals} refusals, {late} late")
    print("\n".join(critical_lines(runs)))
    if args.misses:
        _print_misses(runs)


def _data_plane_of(env: dict[str, str]) -> str:
    """Where a router started as `stack.router` starts it (`-P`, `env`) imports its data
    plane from: the check that `--router-tree` runs that tree's code."""
    probe = "import data_plane; print(data_plane.__file__)"
    args = [sys.executable, "-P", "-c", probe]
    done = subprocess.run(args, env={**os.environ, **env}, capture_output=True, text=True)
    return done.stdout.strip() or done.stderr.strip()


def _print_misses(runs: list[b.BurstRun]) -> None:
    """Each critical miss of the burst windows: its way to the engine against the truth."""
    print(
        "seed | cause | total ms | to engine ms | sent late ms | in router ms | queued ms "
        "| router runnable ms | router CPU ms | engine held | truth ms "
        "| router's prediction ms | route reason | at s"
    )
    for run in runs:
        for sample, path in zip(run.samples, run.paths, strict=True):
            if sample.priority != "critical" or not sample.in_burst or sample.met:
                continue
            why = cause(path, b.fit(), b.engine_latency_s)
            to_engine = "-" if path.to_engine_s is None else f"{path.to_engine_s * 1000:.0f}"
            truth = b.engine_latency_s(path.held + 1) * 1000
            predicted = "-" if path.predicted_s is None else f"{path.predicted_s * 1000:.0f}"
            print(
                f"{run.seed} | {why} | {path.total_s * 1000:.0f} | {to_engine} "
                f"| {path.sent_late_s * 1000:.0f} | {path.in_router_s * 1000:.0f} "
                f"| {path.queued_s * 1000:.0f} | {path.router_runnable_s * 1000:.0f} "
                f"| {path.router_cpu_s * 1000:.0f} | {path.held} | {truth:.0f} | {predicted} "
                f"| {path.reason} | {path.at_s:.2f}"
            )


if __name__ == "__main__":
    main()
