"""PNG plots of reports: latency vs concurrency per pair, and accuracy vs cost across pairs.

Uses matplotlib's object API with the Agg canvas (no pyplot, no global figure state, no display).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from contracts.profile_report import LatencySample, ProfileReport
from profiler.reports.report import output_usd_per_mtok


def _series(report: ProfileReport) -> dict[tuple[int, int], list[LatencySample]]:
    """Closed-loop samples grouped by (input, output) size, sorted by concurrency."""
    groups: dict[tuple[int, int], list[LatencySample]] = {}
    for sample in report.latency:
        if sample.open_loop_rate_rps is None:
            groups.setdefault((sample.input_tokens, sample.output_tokens), []).append(sample)
    return {k: sorted(v, key=lambda s: s.concurrency) for k, v in sorted(groups.items())}


def plot_latency(reports: Sequence[ProfileReport], path: Path) -> Path:
    """TTFT p95, TPOT p95 and e2e p95 against concurrency: one line per pair and size."""
    fig = Figure(figsize=(15, 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 3)
    panels = [("TTFT p95 (ms)", "ttft_s", 1000.0), ("TPOT p95 (ms)", "tpot_s", 1000.0)]
    panels.append(("end-to-end p95 (s)", "e2e_s", 1.0))
    levels = sorted({s.concurrency for r in reports for s in r.latency})
    for ax, (title, attr, scale) in zip(axes, panels, strict=True):
        for report in reports:
            for (inp, out), samples in _series(report).items():
                xs = [s.concurrency for s in samples]
                ys = [getattr(s, attr).p95 * scale for s in samples]
                ax.plot(xs, ys, marker="o", label=f"{report.pair} in={inp} out={out}")
        ax.set_title(title)
        ax.set_xlabel("concurrency (closed loop)")
        ax.set_xscale("log", base=2)
        ax.set_xticks(levels, [str(c) for c in levels])
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize="small")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return path


def plot_accuracy_cost(reports: Sequence[ProfileReport], path: Path) -> Path:
    """Mean accuracy over categories against output price per million tokens, one point per
    pair (pairs without a price are left out, since they have no x position)."""
    fig = Figure(figsize=(7, 5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    for report in reports:
        price = output_usd_per_mtok(report)
        if price is None:
            continue
        accuracy = math.fsum(a.accuracy for a in report.accuracy) / len(report.accuracy)
        # a legend, not annotations: pairs of one family sit close together
        ax.scatter([price], [accuracy], s=50, label=report.pair)
    ax.set_xlabel("output price (USD per million tokens)")
    ax.set_ylabel("mean accuracy over categories")
    ax.set_ylim(0.0, 1.05)
    ax.margins(x=0.1)
    ax.grid(True, alpha=0.3)
    if ax.collections:
        ax.legend(fontsize="small", loc="lower right")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return path


def write_plots(reports: Sequence[ProfileReport], directory: Path) -> list[Path]:
    """Both plots into `directory`: latency.png and accuracy_cost.png."""
    return [
        plot_latency(reports, directory / "latency.png"),
        plot_accuracy_cost(reports, directory / "accuracy_cost.png"),
    ]
