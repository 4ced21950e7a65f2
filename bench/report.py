"""Write `bench/RESULTS.md` and `bench/results.json` from one run's results.

Every number in the files comes from the run object passed in; nothing is typed in by hand.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, is_dataclass
from pathlib import Path
from typing import Any

from bench.admission.report import admission_lines
from bench.admission.section import AdmissionResult
from bench.common.check import Check
from bench.common.machine import MachineFacts
from bench.feedback.accuracy_drift import AccuracyDriftResult
from bench.feedback.report import accuracy_drift_lines, feedback_lines
from bench.feedback.section import FeedbackResult
from bench.floors.report import floor_lines
from bench.floors.section import FloorScenarioResult
from bench.hostile.report import hostile_lines
from bench.hostile.section import HostileResult
from bench.overhead.ab import ABRow, Share, ab_rows, verdicts
from bench.overhead.decision import SpeedResult
from bench.overhead.hotspots import Hotspots
from bench.overhead.memory import MemoryResult
from bench.overhead.section import TargetRun
from bench.quality.report import quality_lines
from bench.quality.results import QualityResult
from bench.replicas.herding import HerdResult, herding_lines
from bench.replicas.section import ReplicaResult, replica_lines
from bench.scale.report import scale_lines
from bench.scale.section import ScaleResult
from bench.soak.results import SoakResult


@dataclass
class BenchRun:
    """Everything one `python -m bench ...` invocation measured."""

    facts: MachineFacts
    command: str
    quick: bool
    tools: dict[str, str] = field(default_factory=dict)
    overhead: list[TargetRun] | None = None
    decision: list[SpeedResult] | None = None
    quality: QualityResult | None = None
    memory: MemoryResult | None = None
    soak: SoakResult | None = None
    hotspots: Hotspots | None = None
    checks: list[Check] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    replicas: list[ReplicaResult] | None = None
    feedback: FeedbackResult | None = None
    accuracy_drift: AccuracyDriftResult | None = None
    floors: FloorScenarioResult | None = None  # the near-floor scenario (section 3b)
    herding: list[HerdResult] | None = None
    hostile: HostileResult | None = None  # section 7 (issue 22)
    scale: ScaleResult | None = None  # section 8
    admission: AdmissionResult | None = None  # section 9 (issue 23)


def _num(x: float, digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{digits}f}"


def _jsonable(obj: Any) -> Any:
    if is_dataclass(obj) and not isinstance(obj, type):
        return _jsonable(asdict(obj))
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, float) and (math.isnan(obj) or math.isinf(obj)):
        return None
    return obj


def checks_table(checks: list[Check]) -> list[str]:
    lines = [
        "| section | target | figure | baseline | ratio | target | result | note |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in checks:
        verdict = "**pass**" if c.passed else "**FAIL**"
        lines.append(
            f"| {c.section} | {c.name} | {_num(c.figure)} {c.unit} | {_num(c.baseline)} {c.unit} "
            f"| {_num(c.ratio, 3)} | {c.target} | {verdict} | {c.detail} |"
        )
    return lines


def _added(value: float, base: float | None) -> str:
    return _num(value - base) if base is not None else "—"


def _cpu(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


def _share(share: Share | None) -> str:
    if share is None:
        return "—"
    sign = "" if share.measurable else " (not measurable)"
    return f"{share.median:+.3f} [{share.low:+.3f} .. {share.high:+.3f}]{sign}"


def ab_lines(rows: list[ABRow]) -> list[str]:
    """Each hand-written piece against the library it replaces (bench/overhead/ab.py)."""
    if not rows:
        return []
    lines = [
        "",
        "A/B: Gearbox as built against the same data plane with one piece swapped for the "
        "library it replaces (same run, same harness; figures are medians over the rounds). "
        "*share* = (Gearbox - variant) / minimal proxy: what the piece adds to the ratio the "
        "throughput targets are about [lowest .. highest round]; a share whose sign changes "
        "between rounds is not measurable.",
        "",
        "| piece | ours vs theirs | stream | conns | req/s ours / theirs "
        "| CPU µs/req ours / theirs | share of req/s ratio | share of req/CPU-s ratio |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.piece} | {r.ours} vs {r.theirs} | {r.stream} | {r.connections} "
            f"| {_num(r.ours_rps, 0)} / {_num(r.theirs_rps, 0)} "
            f"| {_cpu(r.ours_cpu_us)} / {_cpu(r.theirs_cpu_us)} "
            f"| {_share(r.share)} | {_share(r.cpu_share)} |"
        )
    lines += [
        "",
        "Verdict per piece (kept when its share of req per CPU-second is measurable and "
        "positive in at least half its rows and measurably negative in none; otherwise a "
        "candidate for deletion):",
        "",
    ]
    for v in verdicts(rows):
        said = "earns its place" if v.keep else "**candidate for deletion**"
        lines.append(
            f"- {v.piece}: {said} (measurable gain in {v.gains} of {v.rows} rows, "
            f"measurable loss in {v.losses})"
        )
    return lines


def overhead_lines(runs: list[TargetRun]) -> list[str]:
    lines = ["## 1. Proxy overhead", ""]
    lines += [
        "Closed loop (wrk, one thread, pinned to the aux core). *added* = this target's latency "
        "minus direct-to-nginx at the same connection count.",
        "",
        "| target | stream | conns | req/s | p50 ms | p99 ms | added p50 ms | added p99 ms "
        "| proxy CPU µs/req | errors |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    direct = {r.stream: r for r in runs if r.target == "direct" and not r.error and not r.round}
    for run in runs:
        label = f"{run.label} (round {run.round + 1})" if run.round else run.label
        if run.error:
            lines.append(f"| {label} | {run.stream} | — | failed: {run.error[:120]!r} ||||||")
            continue
        for c in run.closed:
            d = direct.get(run.stream)
            dc = d.closed_at(c.connections) if d else None
            lines.append(
                f"| {label} | {run.stream} | {c.connections} | {_num(c.requests_per_s, 0)} "
                f"| {_num(c.p50_ms)} | {_num(c.p99_ms)} "
                f"| {_added(c.p50_ms, dc.p50_ms if dc else None)} "
                f"| {_added(c.p99_ms, dc.p99_ms if dc else None)} "
                f"| {_cpu(c.cpu_us_per_request)} | {c.errors} |"
            )
    lines += ab_lines(ab_rows(runs))
    lines += [
        "",
        "Open loop (fixed schedule, latency from the scheduled send time; "
        "rates above 80% of a target's closed-loop capacity are skipped).",
        "",
        "| target | stream | rate req/s | achieved | p50 ms | p99 ms | p99.9 ms | added p50 ms "
        "| added p99 ms | proxy CPU µs/req | errors |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        for o in run.open:
            d = direct.get(run.stream)
            do = d.open_at(o.rate_rps) if d else None
            lines.append(
                f"| {run.label} | {run.stream} | {o.rate_rps:g} | {_num(o.achieved_rps, 0)} "
                f"| {_num(o.p50_ms)} | {_num(o.p99_ms)} | {_num(o.p999_ms)} "
                f"| {_added(o.p50_ms, do.p50_ms if do else None)} "
                f"| {_added(o.p99_ms, do.p99_ms if do else None)} "
                f"| {_cpu(o.cpu_us_per_request)} | {o.errors} |"
            )
        for note in run.notes:
            lines.append(f"| {run.label} | {run.stream} | {note} |||||||||")
        if run.skipped_rates_rps:
            skipped = ", ".join(f"{r:g}" for r in run.skipped_rates_rps)
            lines.append(f"| {run.label} | {run.stream} | {skipped} | skipped (saturated) ||||||||")
    return [*lines, ""]


def decision_lines(results: list[SpeedResult]) -> list[str]:
    lines = ["## 2. Decision speed (pytest-benchmark, pinned to the proxy core)", ""]
    lines += ["| function | input | median µs | mean µs | min µs | stddev µs | rounds |"]
    lines += ["|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(
            f"| {r.section} | {r.size} | {_num(r.median_us)} | {_num(r.mean_us)} "
            f"| {_num(r.min_us)} | {_num(r.stddev_us)} | {r.rounds} |"
        )
    return [*lines, ""]


def memory_lines(m: MemoryResult) -> list[str]:
    mib = 1024 * 1024
    return [
        "## 4. Memory (data plane RSS, overhead set-up, 32 connections)",
        "",
        "| RSS at start MiB | after warm-up MiB | after requests MiB | growth | requests "
        "| warm-up | fds before → after | errors |",
        "|---|---|---|---|---|---|---|---|",
        f"| {m.rss_start_bytes / mib:.1f} | {m.rss_before_bytes / mib:.1f} "
        f"| {m.rss_after_bytes / mib:.1f} | {m.growth_ratio * 100:+.1f}% | {m.requests:,} "
        f"| {m.warmup_requests:,} | {m.fds_before} → {m.fds_after} | {m.errors} |",
        "",
    ]


def soak_lines(s: SoakResult) -> list[str]:
    mib = 1024 * 1024
    return [
        "## Soak (data plane under steady mixed traffic, flapping breaker, republished table)",
        "",
        "| duration s | rate req/s | requests | ok | unexpected errors | RSS MiB first → last "
        "| fds first → last | tables published | fault toggles | breaker transitions | fallbacks |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        f"| {s.duration_s:.0f} | {s.rate_rps:g} | {s.requests:,} | {s.ok:,} "
        f"| {s.unexpected_errors} | {s.rss_first_bytes / mib:.1f} → {s.rss_last_bytes / mib:.1f} "
        f"| {s.fds_first} → {s.fds_last} | {s.tables_published} | {s.fault_toggles} "
        f"| {s.breaker_transitions} | {s.fallbacks} |",
        "",
    ]


def hotspot_lines(h: Hotspots) -> list[str]:
    lines = [
        "### Where the data plane's CPU goes (py-spy, main thread, 32 connections, non-streaming)",
        "",
        f"{h.samples} samples. Self time by library:",
        "",
        "| library | share |",
        "|---|---|",
    ]
    lines += [f"| {name} | {share * 100:.1f}% |" for name, share in h.by_module]
    lines += ["", "Top frames by self time:", "", "| frame | share |", "|---|---|"]
    lines += [f"| `{name}` | {share * 100:.1f}% |" for name, share in h.self_time]
    lines += ["", "Gearbox functions by inclusive time:", "", "| function | share |", "|---|---|"]
    lines += [f"| `{name}` | {share * 100:.1f}% |" for name, share in h.inclusive]
    return [*lines, ""]


def _quality_section_lines(run: BenchRun) -> list[str]:
    """Section 3 and the near-floor scenario beside it (3b)."""
    lines = quality_lines(run.quality) if run.quality is not None else []
    return lines + (floor_lines(run.floors) if run.floors is not None else [])


def _section_lines(run: BenchRun) -> list[str]:
    """Each measured section's tables, in report order."""
    lines: list[str] = []
    if run.overhead is not None:
        lines += overhead_lines(run.overhead)
    if run.hotspots is not None:
        lines += hotspot_lines(run.hotspots)
    if run.decision is not None:
        lines += decision_lines(run.decision)
    lines += _quality_section_lines(run)
    if run.memory is not None:
        lines += memory_lines(run.memory)
    if run.soak is not None:
        lines += soak_lines(run.soak)
    if run.replicas is not None:
        lines += replica_lines(run.replicas) + herding_lines(run.herding or [])
    return lines + _later_section_lines(run)


def _later_section_lines(run: BenchRun) -> list[str]:
    """Sections 6 to 9, in report order."""
    lines: list[str] = []
    if run.feedback is not None:
        lines += feedback_lines(run.feedback)
    if run.accuracy_drift is not None:
        lines += accuracy_drift_lines(run.accuracy_drift)
    if run.hostile is not None:
        lines += hostile_lines(run.hostile)
    if run.scale is not None:
        lines += scale_lines(run.scale)
    if run.admission is not None:
        lines += admission_lines(run.admission)
    return lines


def render_markdown(run: BenchRun) -> str:
    f = run.facts
    lines = [
        "# Gearbox benchmark results",
        "",
        f"Written by `{run.command}`{' (quick smoke run)' if run.quick else ''}; "
        "rerun `make bench` to refresh. Do not edit by hand.",
        "",
        "| date | CPU | cores | Python | pinning | load average at start |",
        "|---|---|---|---|---|---|",
        f"| {f.date_utc} | {f.cpu_model} | {f.cores} | {f.python} | {f.pinning.describe()} "
        f"| {' / '.join(str(x) for x in f.load_average)} |",
        "",
    ]
    if run.tools:
        lines += ["Tools: " + "; ".join(f"{k} = {v}" for k, v in run.tools.items()), ""]
    lines += ["## Targets", "", *checks_table(run.checks), ""]
    if run.errors:
        lines += ["## Sections that failed", ""]
        lines += [f"- **{k}**: `{v[:400]}`" for k, v in run.errors.items()] + [""]
    lines += _section_lines(run)
    if run.notes:
        lines += ["## Notes", ""] + [f"- {n}" for n in run.notes] + [""]
    return "\n".join(lines)


def write_report(run: BenchRun, md_path: Path, json_path: Path) -> None:
    md_path.write_text(render_markdown(run))
    json_path.write_text(json.dumps(_jsonable(run), indent=1, sort_keys=True) + "\n")
