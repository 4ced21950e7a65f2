"""Profile every pair of the fleet with `python -m profiler run` and push the reports.

Short sweeps: the point is a table measured in this run, not a benchmark. Real engines share
one CPU, so they are profiled one after another; simulated ones all at once.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from contracts.profile_report import ProfileReport
from demo.engine_check import Dropped
from demo.fleet import ROOT, FleetPair
from demo.processes import StartupError, log_tail
from demo.sizing import DemoSize, EvalLine, progress_line, select_items
from profiler.evals.accuracy import EvalItem
from profiler.run.profiling import load_eval_sets

EVALSETS = tuple(sorted((ROOT / "profiler" / "evalsets").glob("*.jsonl")))
# Replayed and scored by the demo: items no profile was measured on
# (profiler.evals.evalset_generator).
HOLDOUT = tuple(sorted((ROOT / "profiler" / "evalsets" / "holdout").glob("*.jsonl")))


@dataclass(frozen=True, slots=True)
class Sweep:
    """The profiler's load flags for one demo mode."""

    concurrency: str
    input_tokens: str
    output_tokens: str
    requests_per_level: int
    warmup: int
    parallel: int
    evalsets: tuple[Path, ...] = EVALSETS


# Two prompt lengths at least: with one, TTFT per input token cannot be told from the intercept
# and the fit sets it to 0 (control_plane/build/fitting.py).
REAL_SWEEP = Sweep("1,4", "32,128", "16", requests_per_level=8, warmup=1, parallel=1)
# Simulated pairs two at a time, one per core: five at once on two cores measured the machine,
# not the engines (TPOT x2-3), and a 32-request burst then shed tight requests that a table
# measured alone would have placed on idle pairs (+8 s of demo time).
SIM_SWEEP = Sweep("1,8,32", "128,512", "32", requests_per_level=32, warmup=2, parallel=2)


def sweep_tokens(sweep: Sweep) -> tuple[int, int]:
    """(output tokens the eval pass asks for at most, output tokens of the load sweep)."""
    items, _, _ = load_eval_sets(sweep.evalsets)
    return sum(i.max_tokens for i in items), load_tokens(sweep)


def load_tokens(sweep: Sweep) -> int:
    """Output tokens the load sweep asks for: every level's requests and warm-ups."""
    levels = len(sweep.concurrency.split(",")) * len(sweep.input_tokens.split(","))
    load = sum(int(out) for out in sweep.output_tokens.split(","))
    return levels * load * (sweep.requests_per_level + sweep.warmup)


def eval_lines(paths: Sequence[Path]) -> list[EvalLine]:
    """The eval items of `paths` in file order, each with its JSONL line (checked here)."""
    lines = []
    for path in paths:
        for raw in path.read_text().splitlines():
            if raw.strip():
                item = EvalItem.model_validate(json.loads(raw))
                lines.append(EvalLine(item.category, item.max_tokens, raw))
    return lines


def size_work(sweep: Sweep, lines: Sequence[EvalLine], size: DemoSize) -> tuple[int, int, int]:
    """(eval items, their output tokens, load-sweep output tokens) of one pair at `size`."""
    kept = select_items(lines, size.items_per_category)
    sized = replace(sweep, requests_per_level=size.requests_per_level)
    return len(kept), sum(line.max_tokens for line in kept), load_tokens(sized)


def sized_sweep(sweep: Sweep, lines: Sequence[EvalLine], size: DemoSize, folder: Path) -> Sweep:
    """`sweep` at `size`: its requests per level, and (when the size keeps fewer items) eval
    sets of the kept items written to `folder`, one file per category."""
    sized = replace(sweep, requests_per_level=size.requests_per_level)
    if size.items_per_category is None:
        return sized
    folder.mkdir(parents=True, exist_ok=True)
    files: dict[str, list[str]] = {}
    for line in select_items(lines, size.items_per_category):
        files.setdefault(line.category, []).append(line.text)
    paths = []
    for category, texts in files.items():
        path = folder / f"{category}.jsonl"
        path.write_text("\n".join(texts) + "\n")
        paths.append(path)
    return replace(sized, evalsets=tuple(paths))


def profiler_argv(pair: FleetPair, sweep: Sweep, out: Path, control_plane_url: str) -> list[str]:
    argv = [sys.executable, "-m", "profiler", "run", "--model", pair.served_name]
    argv += ["--family", pair.family, "--quantization", pair.quantization]
    argv += ["--endpoint", pair.url, "--hardware", pair.hardware]
    argv += ["--hourly-usd", f"{pair.hourly_usd}", "--concurrency", sweep.concurrency]
    argv += ["--input-tokens", sweep.input_tokens, "--output-tokens", sweep.output_tokens]
    argv += ["--requests-per-level", str(sweep.requests_per_level)]
    argv += ["--warmup", str(sweep.warmup), "--out", str(out), "--quiet"]
    argv += ["--push", control_plane_url, "--evalset", *map(str, sweep.evalsets)]
    return argv


def describe(report: ProfileReport, seconds: float) -> str:
    first, last = report.latency[0], report.latency[-1]
    accuracy = sum(a.accuracy for a in report.accuracy) / len(report.accuracy)
    return (
        f"  {report.pair:32} {seconds:5.0f} s  TTFT p95 {first.ttft_s.p95 * 1000:6.0f} ms  "
        f"TPOT p95 {first.tpot_s.p95 * 1000:5.1f} ms  "
        f"{max(s.output_tokens_per_s for s in report.latency):6.1f} tok/s (c={last.concurrency})  "
        f"mean accuracy {accuracy:.2f}"
    )


async def profile_pair(
    pair: FleetPair, sweep: Sweep, control_plane_url: str, token: str, out_dir: Path
) -> ProfileReport:
    """Run the profiler on one pair, push to the control plane, return the report it wrote."""
    out = out_dir / "profiles" / f"{pair.pair}.json"
    log = out_dir / "logs" / f"profiler-{pair.pair}.log"
    out.parent.mkdir(parents=True, exist_ok=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with log.open("wb") as sink:
        process = await asyncio.create_subprocess_exec(
            *profiler_argv(pair, sweep, out, control_plane_url),
            stdout=sink,
            stderr=sink,
            stdin=asyncio.subprocess.DEVNULL,
            env={**os.environ, "GEARBOX_PROF_CONTROL_PLANE_TOKEN": token},
        )
        try:
            code = await process.wait()
        except asyncio.CancelledError:  # the demo is stopping: so does its profiler
            process.terminate()
            await asyncio.shield(process.wait())
            raise
    if code != 0:
        raise StartupError(f"profiling {pair.pair} failed (exit {code}):\n{log_tail(log)}")
    report = ProfileReport.model_validate_json(out.read_bytes())
    print(describe(report, time.monotonic() - start), flush=True)
    return report


async def profile_fleet(
    fleet: Sequence[FleetPair], sweep: Sweep, control_plane_url: str, token: str, out_dir: Path
) -> tuple[list[ProfileReport], list[Dropped]]:
    """Profile every pair, at most `sweep.parallel` at a time, in fleet order. A pair whose
    profile fails (its engine died: the profiler stops it at once) is dropped with one line,
    and the others go on."""
    slots = asyncio.Semaphore(sweep.parallel)
    start, finished = time.monotonic(), 0

    async def one(pair: FleetPair) -> ProfileReport | Dropped:
        nonlocal finished
        async with slots:
            try:
                return await profile_pair(pair, sweep, control_plane_url, token, out_dir)
            except StartupError as err:
                log = out_dir / "logs" / f"profiler-{pair.pair}.log"
                reason = f"profiling failed: {last_line(str(err))}"
                dropped = Dropped(pair.pair, reason, log, "profiler log")
                print(dropped.line(), flush=True)
                return dropped
            finally:
                finished += 1
                print(progress_line(finished, len(fleet), time.monotonic() - start), flush=True)

    outcomes = await asyncio.gather(*(one(p) for p in fleet))
    reports = [o for o in outcomes if isinstance(o, ProfileReport)]
    return reports, [o for o in outcomes if isinstance(o, Dropped)]


def last_line(message: str) -> str:
    """The profiler's own verdict: its last `error: ...` line, else the message's last line."""
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    errors = [ln.removeprefix("error: ") for ln in lines if ln.startswith("error: ")]
    return (errors or lines or ["(no message)"])[-1][:300]
