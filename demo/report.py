"""The demo's report: per pair share, budget attainment, accuracy on known answers and cost,
and what moved the fleet-wide state during the run: breaker transitions and refits per pair.

Pure: built from the outcomes the client recorded, the counters the data plane exported in this
run (`gearbox_cost_usd_total`, `gearbox_baseline_cost_usd_total`,
`gearbox_circuit_transitions_total`) and the tables the control plane published after the
replay's (a healthy engine whose breaker opens, or a refit nobody asked for, shows here).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from demo.replay import Outcome


@dataclass(frozen=True, slots=True)
class PairRow:
    pair: str
    requests: int
    share: float
    with_budget: int
    budget_met: int
    known_answers: int
    correct: int
    cost_usd: float
    baseline_cost_usd: float
    p50_latency_s: float
    p95_latency_s: float

    @property
    def attainment(self) -> float | None:
        return self.budget_met / self.with_budget if self.with_budget else None

    @property
    def accuracy(self) -> float | None:
        return self.correct / self.known_answers if self.known_answers else None


@dataclass(frozen=True, slots=True)
class DemoReport:
    mode: str
    table_version: int
    requests: int
    errors: int
    rows: tuple[PairRow, ...]
    most_precise: tuple[str, ...]
    by_class: dict[str, dict[str, int]]
    error_samples: tuple[str, ...] = ()
    extras: dict[str, Any] = field(default_factory=dict)
    # pair -> breaker transitions by the state entered ("open", "half_open", "closed")
    breakers: dict[str, dict[str, int]] = field(default_factory=dict)
    # pair -> one line per refit or demotion the control plane published during the run
    refits: dict[str, list[str]] = field(default_factory=dict)
    # why each answered request went where it did: X-Route-Reason's leading word (e.g.
    # best_effort_latency_relaxed: served late rather than refused) -> requests
    reasons: dict[str, int] = field(default_factory=dict)

    @property
    def cost_usd(self) -> float:
        return sum(r.cost_usd for r in self.rows)

    @property
    def baseline_cost_usd(self) -> float:
        return sum(r.baseline_cost_usd for r in self.rows)

    @property
    def saved_ratio(self) -> float | None:
        base = self.baseline_cost_usd
        return 1.0 - self.cost_usd / base if base > 0 else None


def quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile; 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def pair_row(
    pair: str, outcomes: Sequence[Outcome], total: int, costs: Mapping[str, tuple[float, float]]
) -> PairRow:
    budgeted = [o.budget_met for o in outcomes if o.budget_met is not None]
    graded = [o.correct for o in outcomes if o.correct is not None]
    latencies = [o.latency_s for o in outcomes]
    cost, baseline = costs.get(pair, (0.0, 0.0))
    return PairRow(
        pair=pair,
        requests=len(outcomes),
        share=len(outcomes) / total if total else 0.0,
        with_budget=len(budgeted),
        budget_met=sum(budgeted),
        known_answers=len(graded),
        correct=sum(graded),
        cost_usd=cost,
        baseline_cost_usd=baseline,
        p50_latency_s=quantile(latencies, 0.5),
        p95_latency_s=quantile(latencies, 0.95),
    )


def build_report(
    mode: str,
    table: Mapping[str, Any],
    outcomes: Sequence[Outcome],
    costs: Mapping[str, tuple[float, float]],
    extras: Mapping[str, Any] | None = None,
    *,
    breakers: Mapping[str, Mapping[str, int]] | None = None,
    refits: Mapping[str, Sequence[str]] | None = None,
) -> DemoReport:
    """Aggregate the run. Pairs appear in the table's (cost) order, unused ones with 0 requests."""
    served = [o for o in outcomes if o.pair]  # answered by a pair, perhaps cut short
    by_pair: dict[str, list[Outcome]] = {e["pair"]: [] for e in table["entries"]}
    for outcome in served:
        by_pair.setdefault(outcome.pair or "", []).append(outcome)
    by_class: dict[str, dict[str, int]] = {}
    for outcome in served:
        counts = by_class.setdefault(outcome.job.budget_class, {})
        counts[outcome.pair or ""] = counts.get(outcome.pair or "", 0) + 1
    failed = [o for o in outcomes if o.error is not None]
    reasons = Counter(reason_word(o.reason) for o in served if o.reason)
    return DemoReport(
        mode=mode,
        table_version=int(table["version"]),
        requests=len(outcomes),
        errors=len(failed),
        rows=tuple(pair_row(p, os, len(served), costs) for p, os in by_pair.items()),
        most_precise=tuple(e["pair"] for e in table["entries"] if e["precision_rank"] == 0),
        by_class=by_class,
        error_samples=tuple(Counter(o.error for o in failed if o.error).keys())[:5],
        extras=dict(extras or {}),
        breakers={p: dict(t) for p, t in (breakers or {}).items()},
        refits={p: list(r) for p, r in (refits or {}).items()},
        reasons=dict(sorted(reasons.items(), key=_by_count)),
    )


def reason_word(reason: str) -> str:
    """X-Route-Reason without its suffixes (a best-effort chance, a classifier's doubt): one
    of the router's route reasons, so the report's counts stay few."""
    return reason.split(";", 1)[0].split(" ", 1)[0].strip()


def _pct(value: float | None) -> str:
    return "   -" if value is None else f"{value * 100:3.0f}%"


def render_report(report: DemoReport) -> str:
    """The at-a-glance text: one line per pair, then totals and the gear shifts per class."""
    lines = [
        f"{'pair':34} {'share':>6} {'budget met':>11} {'accuracy':>9} {'cost USD':>11} "
        f"{'p95 s':>6}",
    ]
    for r in report.rows:
        met = f"{_pct(r.attainment)} ({r.budget_met}/{r.with_budget})" if r.with_budget else "-"
        acc = f"{_pct(r.accuracy)} ({r.correct}/{r.known_answers})" if r.known_answers else "-"
        lines.append(
            f"{r.pair:34} {_pct(r.share):>6} {met:>11} {acc:>9} {r.cost_usd:11.8f} "
            f"{r.p95_latency_s:6.2f}"
        )
    saved = report.saved_ratio
    lines += [
        f"requests {report.requests}, not answered in full {report.errors}, "
        f"table v{report.table_version}",
        f"cost of this run: ${report.cost_usd:.8f}; everything on the most precise pair "
        f"({', '.join(report.most_precise)}): ${report.baseline_cost_usd:.8f}"
        + ("" if saved is None else f"; saved {saved * 100:.0f}%"),
        "routing per budget class:",
    ]
    for budget_class, counts in sorted(report.by_class.items()):
        spread = ", ".join(f"{pair} {n}" for pair, n in sorted(counts.items(), key=_by_count))
        lines.append(f"  {budget_class:9} {spread}")
    lines += [f"  error: {sample}" for sample in report.error_samples]
    if report.reasons:
        lines.append(
            "route reasons: " + ", ".join(f"{why} {n}" for why, n in report.reasons.items())
        )
    lines += _state_lines(report)
    return "\n".join(lines)


def _state_lines(report: DemoReport) -> list[str]:
    """Breaker transitions and refits per pair ("none" when nothing moved)."""
    lines = ["breaker transitions per pair:"]
    moved = {p: t for p, t in sorted(report.breakers.items()) if any(t.values())}
    lines += [
        f"  {pair:34} " + ", ".join(f"{to} {n}" for to, n in sorted(t.items()) if n)
        for pair, t in moved.items()
    ] or ["  none"]
    lines.append("refits per pair:")
    lines += [
        f"  {pair:34} {line}" for pair, refits in sorted(report.refits.items()) for line in refits
    ] or ["  none"]
    return lines


def _by_count(item: tuple[str, int]) -> tuple[int, str]:
    return (-item[1], item[0])


def report_json(report: DemoReport) -> dict[str, Any]:
    data = asdict(report)
    data["rows"] = [
        {**asdict(r), "attainment": r.attainment, "accuracy": r.accuracy} for r in report.rows
    ]
    data.update(
        cost_usd=report.cost_usd,
        baseline_cost_usd=report.baseline_cost_usd,
        saved_ratio=report.saved_ratio,
    )
    return data


def breakers_from_metrics(families: Iterable[Any]) -> dict[str, dict[str, int]]:
    """Breaker transitions per pair and state entered, from the data plane's
    `gearbox_circuit_transitions_total{endpoint, to}` (endpoint ids are `pair#i`)."""
    found: dict[str, dict[str, int]] = {}
    for family in families:
        if family.name != "gearbox_circuit_transitions":
            continue
        for sample in family.samples:
            endpoint, to = sample.labels.get("endpoint"), sample.labels.get("to")
            if not sample.name.endswith("_total") or not endpoint or not to:
                continue
            counts = found.setdefault(endpoint.rsplit("#", 1)[0], {})
            counts[to] = counts.get(to, 0) + int(sample.value)
    return found


def refits_from_tables(tables: Iterable[Mapping[str, Any]]) -> dict[str, list[str]]:
    """One line per pair for each table the feedback loop published (`refit` provenance):
    the latency factors it applied, or the accuracy it demoted to."""
    found: dict[str, list[str]] = {}
    for table in tables:
        refit = table.get("refit")
        if not refit:
            continue
        version = table.get("version")
        for pair, fit in refit.get("pairs", {}).items():
            found.setdefault(pair, []).append(
                f"v{version}: TTFT x{fit['ttft_factor']:.2f}, TPOT x{fit['tpot_factor']:.2f} "
                f"(observed / predicted {fit['observed_e2e_ratio']:.2f} over "
                f"{fit['samples']} samples)"
            )
        for pair, demoted in refit.get("demoted", {}).items():
            accuracies = ", ".join(f"{c} {a:.3f}" for c, a in sorted(demoted.items()))
            found.setdefault(pair, []).append(f"v{version}: accuracy demoted to {accuracies}")
    return found


def costs_from_metrics(families: Iterable[Any]) -> dict[str, tuple[float, float]]:
    """(cost, baseline cost) per pair from parsed Prometheus families of the data plane."""
    costs: dict[str, list[float]] = {}
    for family in families:
        if family.name not in ("gearbox_cost_usd", "gearbox_baseline_cost_usd"):
            continue
        slot = 0 if family.name == "gearbox_cost_usd" else 1
        for sample in family.samples:
            if sample.name.endswith("_total") and "pair" in sample.labels:
                costs.setdefault(sample.labels["pair"], [0.0, 0.0])[slot] += float(sample.value)
    return {pair: (c[0], c[1]) for pair, c in costs.items()}
