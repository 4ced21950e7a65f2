"""CI's overhead gate: a slide in Gearbox's throughput against the minimal aiohttp proxy fails CI.

`python -m bench.overhead.gate [--slowed]` measures the minimal proxy and Gearbox closed loop
(wrk, 1 and 64 connections, 2 s each after a 1 s warm-up, no open loop) in 2 rounds per
streaming mode, each target once per round in a fresh process, with the overhead section's
backend, pinning and body. For each mode and connection count the ratio is Gearbox's median
req/s over the minimal proxy's median req/s, both from this one run. It prints the table and
exits 1 when the ratio at 64 connections falls below GATE_RATIO in either mode (or a target
could not be measured). `--slowed` runs Gearbox with a 300 us busy loop per routed request
(`bench.common.dp_variant slowed`), to show the gate fails on a slowed data plane.
The threshold and the noise it was set against: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from bench.common.backend import run_nginx
from bench.common.machine import Pinning, choose_pinning
from bench.common.targets import GEARBOX_PAIRS, TARGETS, RunContext, Target, gearbox_ab
from bench.overhead.section import OverheadSettings, TargetRun, run_target

GATE_RATIO = 0.55  # Gearbox req/s over the minimal proxy's, at GATE_CONNECTIONS, both modes
GATE_CONNECTIONS = 64
GATE_SETTINGS = OverheadSettings(
    targets=("minimal", "gearbox"),
    connections=(1, GATE_CONNECTIONS),
    rates_rps=(),
    closed_s=2.0,
    warmup_s=1.0,
    repeats=2,
)


@dataclass(frozen=True, slots=True)
class GateRow:
    """One mode at one connection count: the medians over the rounds and their ratio."""

    stream: bool
    connections: int
    minimal_rps: float | None
    gearbox_rps: float | None
    minimal_cpu_us: float | None
    gearbox_cpu_us: float | None

    @property
    def ratio(self) -> float | None:
        if not self.minimal_rps or self.gearbox_rps is None:
            return None
        return self.gearbox_rps / self.minimal_rps

    @property
    def gated(self) -> bool:
        return self.connections == GATE_CONNECTIONS

    @property
    def passed(self) -> bool:
        """A gated row passes at or above GATE_RATIO; a row not gated always passes; an
        unmeasured gated row fails."""
        return not self.gated or (self.ratio is not None and self.ratio >= GATE_RATIO)


def _median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def gate_rows(
    runs: Sequence[TargetRun], settings: OverheadSettings = GATE_SETTINGS
) -> list[GateRow]:
    """PURE: per mode and connection count, the median over the rounds of each target."""
    rows = []
    for stream in settings.streams:
        for conns in settings.connections:
            figures: dict[str, list[tuple[float | None, float | None]]] = {}
            for run in runs:
                cell = run.closed_at(conns) if run.stream == stream and not run.error else None
                if cell is not None and cell.requests:
                    figures.setdefault(run.target, []).append(
                        (cell.requests_per_s, cell.cpu_us_per_request)
                    )
            m, g = figures.get("minimal", []), figures.get("gearbox", [])
            rows.append(
                GateRow(
                    stream,
                    conns,
                    _median([rps for rps, _ in m]),
                    _median([rps for rps, _ in g]),
                    _median([cpu for _, cpu in m]),
                    _median([cpu for _, cpu in g]),
                )
            )
    return rows


def _cell(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def gate_table(rows: Sequence[GateRow]) -> str:
    """PURE: the rows as a Markdown table, with the verdict of each gated row."""
    lines = [
        "| mode | conns | minimal req/s | Gearbox req/s | ratio | minimal CPU us/req "
        "| Gearbox CPU us/req | gate |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        verdict = (">= " if r.passed else "< ") + f"{GATE_RATIO:.2f}" if r.gated else ""
        lines.append(
            f"| {'streaming' if r.stream else 'non-streaming'} | {r.connections} "
            f"| {_cell(r.minimal_rps)} | {_cell(r.gearbox_rps)} | {_cell(r.ratio, 3)} "
            f"| {_cell(r.minimal_cpu_us)} | {_cell(r.gearbox_cpu_us)} | {verdict} |"
        )
    return "\n".join(lines)


def _targets(slowed: bool) -> list[Target]:
    chosen = [t for t in TARGETS if t.name in GATE_SETTINGS.targets]
    if not slowed:
        return chosen
    slow = gearbox_ab(variant="slowed")
    return [replace(t, start=slow) if t.name == "gearbox" else t for t in chosen]


def run_gate(pinning: Pinning, workdir: Path, slowed: bool = False) -> list[TargetRun]:
    """The rounds: per mode, each target once per round, a fresh process each time."""
    s, runs = GATE_SETTINGS, []
    with run_nginx(workdir / "nginx", GEARBOX_PAIRS, pinning.aux) as backend:
        for stream in s.streams:
            for round_ in range(s.repeats):
                for target in _targets(slowed):
                    ctx = RunContext(backend, pinning, workdir / f"{target.name}-{round_}", stream)
                    runs.append(run_target(target, ctx, s, round_))
    return runs


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.overhead.gate", description=__doc__)
    parser.add_argument("--slowed", action="store_true", help="Gearbox + 300 us per request")
    args = parser.parse_args(argv)
    pinning = choose_pinning()
    workdir = Path(tempfile.mkdtemp(prefix="gearbox-gate-"))
    print(f"==> overhead gate; {pinning.describe()}", flush=True)
    try:
        rows = gate_rows(run_gate(pinning, workdir, args.slowed))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(gate_table(rows), flush=True)
    if all(r.passed for r in rows):
        print(f"==> overhead gate passed (>= {GATE_RATIO} at {GATE_CONNECTIONS} conns)")
        return 0
    print(f"==> overhead gate FAILED: Gearbox below {GATE_RATIO} of the minimal proxy", flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
