"""One PNG of the demo report: traffic share, budget attainment and accuracy per pair, and cost
against sending everything to the most precise pair."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from demo.report import DemoReport


def plot_report(report: DemoReport, path: Path) -> Path:
    rows = report.rows
    names = [r.pair for r in rows]
    positions = list(range(len(rows)))
    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(15, 5.4))
    left.bar(positions, [r.share * 100 for r in rows], color="#4c78a8")
    left.set_title("share of traffic (%)")
    width = 0.4
    met = [(r.attainment or 0.0) * 100 for r in rows]
    correct = [(r.accuracy or 0.0) * 100 for r in rows]
    middle.bar([p - width / 2 for p in positions], met, width, label="latency budget met")
    middle.bar([p + width / 2 for p in positions], correct, width, label="correct (known answers)")
    middle.set_title("per pair (%)")
    middle.set_ylim(0, 105)
    middle.legend(loc="lower right", fontsize=8)
    for axis in (left, middle):
        axis.set_xticks(positions, names, fontsize=7, rotation=20, ha="right")
    costs = [report.cost_usd * 1e6, report.baseline_cost_usd * 1e6]
    right.bar([0, 1], costs, color=["#54a24b", "#e45756"])
    right.set_xticks([0, 1], ["routed by Gearbox", "all on the most\nprecise pair"], fontsize=8)
    right.set_title("cost of this run (micro-USD)")
    saved = report.saved_ratio
    fig.suptitle(
        f"Gearbox demo ({report.mode}): {report.requests} requests, table v{report.table_version}"
        + ("" if saved is None else f", {saved * 100:.0f}% cheaper than all-precise")
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
