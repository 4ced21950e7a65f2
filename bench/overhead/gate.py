"""CI's overhead gate: a slide in Gearbox's cost per request against the minimal aiohttp proxy
fails CI.

`python -m bench.overhead.gate [--slowed]` loads the minimal proxy and Gearbox closed loop
side by side, at the same time, on the proxy core (`bench/overhead/gate_rounds.py`: wrk, 1
and 64 connections, 2 s per round after a 1 s warm-up, GATE_SETTINGS.repeats rounds per
streaming mode, the overhead section's backend, pinning and body). Each round gives a ratio:
Gearbox's answered req/s over the minimal proxy's in the same seconds (wrk's errors left
out). Per mode and connection count the gated figure is the median of the rounds' ratios.
It prints the table and exits 1 when that figure at 64 connections falls below GATE_RATIO in
either mode (or a target could not be measured). `--slowed` runs Gearbox with a 300 us busy
loop per routed request (`bench.common.dp_variant slowed`), to show the gate fails on a
slowed data plane. The threshold and the noise it was set against: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from bench.common.machine import choose_pinning
from bench.overhead.gate_rounds import GATE_CONNECTIONS, GATE_SETTINGS, run_gate
from bench.overhead.section import OverheadSettings, TargetRun
from bench.overhead.wrk import ClosedLoopResult

GATE_RATIO = 0.40  # median round's Gearbox req/s over the minimal proxy's, 64 connections


@dataclass(frozen=True, slots=True)
class GateRound:
    """Both targets' closed-loop results over the same seconds."""

    minimal: ClosedLoopResult
    gearbox: ClosedLoopResult

    @property
    def ratio(self) -> float | None:
        """Gearbox's answered req/s over the minimal proxy's."""
        minimal = answered_per_s(self.minimal)
        return answered_per_s(self.gearbox) / minimal if minimal else None

    @property
    def cpu_ratio(self) -> float | None:
        """Gearbox's requests per CPU-second over the minimal proxy's."""
        m, g = self.minimal.cpu_us_per_request, self.gearbox.cpu_us_per_request
        return m / g if m and g else None


def answered_per_s(result: ClosedLoopResult) -> float:
    """Req/s less wrk's errors (socket errors, non-2xx answers, timeouts): a proxy that
    answers errors fast is not fast."""
    if not result.requests:
        return 0.0
    return result.requests_per_s * max(result.requests - result.errors, 0) / result.requests


def _median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


@dataclass(frozen=True, slots=True)
class GateRow:
    """One mode at one connection count: its rounds, in order."""

    stream: bool
    connections: int
    rounds: tuple[GateRound, ...]

    def median(self, target: Literal["minimal", "gearbox"], cpu: bool = False) -> float | None:
        results = [getattr(r, target) for r in self.rounds]
        return _median([r.cpu_us_per_request if cpu else r.requests_per_s for r in results])

    @property
    def ratio(self) -> float | None:
        """The gated figure: the median of the rounds' ratios of req/s."""
        return _median([r.ratio for r in self.rounds])

    @property
    def cpu_ratio(self) -> float | None:
        """Beside it: the median of the rounds' ratios of requests per CPU-second."""
        return _median([r.cpu_ratio for r in self.rounds])

    @property
    def gated(self) -> bool:
        return self.connections == GATE_CONNECTIONS

    @property
    def passed(self) -> bool:
        """A gated row passes at or above GATE_RATIO; a row not gated always passes; an
        unmeasured gated row fails."""
        return not self.gated or (self.ratio is not None and self.ratio >= GATE_RATIO)


def _results(
    runs: Sequence[TargetRun], target: str, stream: bool, conns: int
) -> dict[int, ClosedLoopResult]:
    found = {}
    for run in runs:
        cell = run.closed_at(conns) if run.target == target and run.stream == stream else None
        if cell is not None and cell.requests and not run.error:
            found[run.round] = cell
    return found


def gate_rows(
    runs: Sequence[TargetRun], settings: OverheadSettings = GATE_SETTINGS
) -> list[GateRow]:
    """PURE: per mode and connection count, the rounds in which both targets answered."""
    rows = []
    for stream in settings.streams:
        for conns in settings.connections:
            m = _results(runs, "minimal", stream, conns)
            g = _results(runs, "gearbox", stream, conns)
            paired = tuple(GateRound(m[i], g[i]) for i in sorted(m.keys() & g.keys()))
            rows.append(GateRow(stream, conns, paired))
    return rows


def _cell(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def gate_table(rows: Sequence[GateRow]) -> str:
    """PURE: the rows as a Markdown table, with each round's ratio and the gated verdicts."""
    lines = [
        "| mode | conns | minimal req/s | Gearbox req/s | minimal CPU us/req "
        "| Gearbox CPU us/req | ratio per round | ratio (median) | per CPU-second | gate |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        verdict = ((">= " if r.passed else "< ") + f"{GATE_RATIO:.2f}") if r.gated else ""
        each = " ".join(_cell(x.ratio, 2) for x in r.rounds) or "-"
        lines.append(
            f"| {'streaming' if r.stream else 'non-streaming'} | {r.connections} "
            f"| {_cell(r.median('minimal'))} | {_cell(r.median('gearbox'))} "
            f"| {_cell(r.median('minimal', cpu=True))} | {_cell(r.median('gearbox', cpu=True))} "
            f"| {each} | {_cell(r.ratio, 3)} | {_cell(r.cpu_ratio, 3)} | {verdict} |"
        )
    return "\n".join(lines)


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
        print(f"==> overhead gate passed (>= {GATE_RATIO:.2f} at {GATE_CONNECTIONS} conns)")
        return 0
    print(
        f"==> overhead gate FAILED: Gearbox below {GATE_RATIO:.2f} of the minimal proxy", flush=True
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
