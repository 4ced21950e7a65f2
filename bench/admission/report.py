"""Markdown and target checks for the admission section (PURE)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from bench.admission import burst as b
from bench.admission import tenants
from bench.admission.burst import BurstRun
from bench.admission.misses import CAUSES, Path, causes, clopper_pearson
from bench.admission.section import AdmissionResult
from bench.admission.stack import Busy, Sample
from bench.admission.tenants import SOLO, TenantRun
from bench.common.check import Check
from bench.common.stats import quantile

LIGHT_POINTS = 2.0  # the light tenant's attainment beside the bulk tenant, below its solo run
CRITICAL_ATTAINMENT = 0.99  # the critical class during the 3x burst
# The histogram bucket that holds the queue's deadline for the burst's requests (budget 400 ms
# less the idle answer, 180 ms): at most 1% of waits may end in a later bucket.
WAIT_BUCKET_S = 0.25
CPU_PER_QUEUED_S = 0.001  # the router's CPU time a queued request adds, at most
S = "admission"


def attainment(samples: Iterable[Sample]) -> float:
    """Share answered 200 within its budget (refusals and late answers miss); NaN: none."""
    picked = list(samples)
    return sum(s.met for s in picked) / len(picked) if picked else math.nan


def refused(samples: Iterable[Sample]) -> int:
    return sum(s.status == 429 for s in samples)


def others(samples: Iterable[Sample]) -> int:
    """Answers neither 200 nor 429 (0: no answer)."""
    return sum(s.status not in (200, 429) for s in samples)


def statuses(samples: Iterable[Sample]) -> str:
    """The answers neither 200 nor 429, by status (0: no answer): '18 x 504', or 'none'."""
    counts: dict[int, int] = {}
    for s in samples:
        if s.status not in (200, 429):
            counts[s.status] = counts.get(s.status, 0) + 1
    return ", ".join(f"{n} x {status}" for status, n in sorted(counts.items())) or "none"


def late_refusals(samples: Iterable[Sample]) -> int:
    """429s the client got at or after its request's deadline (sent + budget)."""
    return sum(s.status == 429 and s.seconds >= s.budget_s for s in samples)


def tenant_samples(run: TenantRun, tenant: str) -> list[Sample]:
    return [s for s in run.samples if s.tenant == tenant]


def critical_in_burst(run: BurstRun) -> list[Sample]:
    return [s for s in run.samples if s.priority == "critical" and s.in_burst]


def critical_misses(run: BurstRun) -> dict[str, int]:
    """The burst window's critical misses by cause (`bench.admission.misses`)."""
    untraced = (Path(s.status, s.seconds, s.budget_s, None, 0) for s in run.samples)
    paths = [
        path
        for sample, path in zip(run.samples, run.paths or untraced, strict=True)
        if sample.priority == "critical" and sample.in_burst
    ]
    return causes(paths, b.fit(), b.engine_latency_s)


def critical_interval(runs: Sequence[BurstRun]) -> tuple[int, int, float, float]:
    """Critical requests in the burst windows of `runs`: met, sent, and the 95%
    Clopper-Pearson interval of the attainment."""
    got = [s for run in runs for s in critical_in_burst(run)]
    met = sum(s.met for s in got)
    return (met, len(got), *clopper_pearson(met, len(got)))


def cpu_per_queued_s(on: BurstRun, off: BurstRun) -> float:
    """The router CPU time the queue added over refusing at once, per queued request (it
    includes proxying the requests the queue saved from a refusal); NaN when none queued."""
    return (on.router_cpu_s - off.router_cpu_s) / on.queued if on.queued else math.nan


def _pct(x: float) -> str:
    return "—" if math.isnan(x) else f"{x * 100:.1f}%"


def _ms(x: float) -> str:
    return "—" if math.isnan(x) else f"{x * 1000:.0f} ms"


def _busy(busy: Busy) -> str:
    return f"{busy.mean_running:.1f}, {busy.max_running}"


def _wait(run: BurstRun) -> str:
    if math.isnan(run.wait_p99_le_s):
        return "—"
    return f"<= {run.wait_p99_le_s * 1000:g} ms, {run.wait_mean_s * 1000:.0f} ms"


def _p(samples: Sequence[Sample], q: float) -> float:
    return quantile(sorted(s.seconds for s in samples if s.status == 200), q)


def _idle_lines(r: AdmissionResult) -> list[str]:
    lines = [
        "| budget | max_tokens | requests | 200 | 429 | other | p99 of the 200s |",
        "|---|---|---|---|---|---|---|",
    ]
    cells: dict[tuple[int | None, int], list[Sample]] = {}
    for budget, max_tokens, s in r.idle.samples:
        cells.setdefault((budget, max_tokens), []).append(s)
    for (budget, max_tokens), got in cells.items():
        ok = sum(s.status == 200 for s in got)
        lines.append(
            f"| {'none' if budget is None else f'{budget} ms'} | {max_tokens} | {len(got)} "
            f"| {ok} | {refused(got)} | {others(got)} | {_ms(_p(got, 0.99))} |"
        )
    return lines


def _tenant_lines(r: AdmissionResult) -> list[str]:
    lines = [
        "| run | light: requests | attainment | 429 | p50 | p95 "
        "| bulk: requests | attainment | 429 | engine running: mean, max |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in r.tenants:
        light, bulk = tenant_samples(run, "light"), tenant_samples(run, "bulk")
        bulk_cells = (
            f"{len(bulk)} | {_pct(attainment(bulk))} | {refused(bulk)}" if bulk else "— | — | —"
        )
        lines.append(
            f"| {run.name} | {len(light)} | {_pct(attainment(light))} | {refused(light)} "
            f"| {_ms(_p(light, 0.5))} | {_ms(_p(light, 0.95))} | {bulk_cells} "
            f"| {_busy(run.busy)} |"
        )
    return lines


def _steady_lines(r: AdmissionResult) -> list[str]:
    lines = [
        "| load | admission | requests | attainment | 429 | other answers | p95 of the 200s "
        "| queued | engines running: mean, max |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for run in r.steady:
        mode = "flow control" if run.flow else "off (forward all)"
        lines.append(
            f"| {run.load:g}x | {mode} | {len(run.samples)} | {_pct(attainment(run.samples))} "
            f"| {refused(run.samples)} | {statuses(run.samples)} | {_ms(_p(run.samples, 0.95))} "
            f"| {run.queued:.0f} | {_busy(run.busy)} |"
        )
    return lines


def _burst_lines(r: AdmissionResult) -> list[str]:
    lines = [
        "| run | tenant | priority | requests | attainment | 429 | late 429s "
        "| router CPU | queued | wait: p99, mean | engines running: mean, max |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in (r.burst, r.burst_queue_off):
        extra = f"{run.router_cpu_s:.2f} s | {run.queued:.0f} | {_wait(run)} | {_busy(run.busy)}"
        for tenant in ("steady", "bursty"):
            for priority in (*(m[0] for m in b.MIX), "all"):
                got = [
                    s for s in run.samples if s.tenant == tenant and priority in (s.priority, "all")
                ]
                lines.append(
                    f"| {run.name} | {tenant} | {priority} | {len(got)} "
                    f"| {_pct(attainment(got))} | {refused(got)} | {late_refusals(got)} "
                    f"| {extra} |"
                )
    return lines


def critical_lines(runs: Sequence[BurstRun]) -> list[str]:
    """Per seed (flow control): the critical requests of the burst window, met, misses by
    cause, the steady tenant's attainment, and the CPU waits; then all seeds with the 95%
    interval."""
    lines = [
        "| seed | critical | met | attainment | misses: "
        + ", ".join(CAUSES)
        + " | critical queued (sent past budget) | steady tenant | router, client runnable |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        got = critical_in_burst(run)
        misses = ", ".join(str(n) for n in critical_misses(run).values())
        steady = attainment(s for s in run.samples if s.tenant == "steady")
        lines.append(
            f"| {run.seed} | {len(got)} | {sum(s.met for s in got)} | {_pct(attainment(got))} "
            f"| {misses} | {run.critical_queued:.0f} ({run.critical_past_budget:.0f}) "
            f"| {_pct(steady)} "
            f"| {run.router_runnable_s:.2f} s, {run.client_runnable_s:.2f} s |"
        )
    met, n, low, high = critical_interval(runs)
    total = dict.fromkeys(CAUSES, 0)
    for run in runs:
        for cause, count in critical_misses(run).items():
            total[cause] += count
    steady_all = attainment(s for run in runs for s in run.samples if s.tenant == "steady")
    lines.append(
        f"| all | {n} | {met} | {_pct(met / n if n else math.nan)} "
        f"(95%: {_pct(low)} to {_pct(high)}) | {', '.join(map(str, total.values()))} "
        f"| {sum(run.critical_queued for run in runs):.0f} "
        f"({sum(run.critical_past_budget for run in runs):.0f}) | {_pct(steady_all)} | |"
    )
    return lines


def admission_lines(r: AdmissionResult) -> list[str]:
    d = r.durations
    return [
        "## 9. Admission as flow control (issue 32)",
        "",
        f"### Idle sequential client ({d.idle_requests} requests, shipped 8B profiles)",
        "",
        *_idle_lines(r),
        "",
        f"### Light tenant (2 loops) beside a bulk tenant (12 loops), {d.tenants_s:g} s each",
        "",
        *_tenant_lines(r),
        "",
        f"### Steady mixed trace on six pairs, {d.steady_s:g} s at each load",
        "",
        *_steady_lines(r),
        "",
        f"### A tenant's burst at {b.BURST_TIMES:g}x capacity ({b.capacity_rps():.1f} req/s), "
        f"{d.burst_s:g} s",
        "",
        *_burst_lines(r),
        "",
        "Critical requests in the burst window, flow control, per seed's schedule "
        "(`bench.admission.misses`: why each miss missed; runnable: seconds the router's and "
        "the clients' and engines' event loops waited for a CPU over the run):",
        "",
        *critical_lines(r.bursts),
        "",
        "Attainment: answered 200 within the request's budget, over all requests sent "
        "(refusals and late answers miss). A late 429 reached the client at or after its "
        "request's deadline (sent + budget). Waits are the router's "
        "`gearbox_flow_queue_wait_seconds` (dispatched and refused): the p99 as the bound of "
        "the bucket that holds it, the mean exact (sum over count). Engine running: requests "
        f"decoding at once per simulated engine, sampled every 10 ms; {tenants.SLOTS} fit in "
        "the budget.",
        "",
    ]


def admission_checks(r: AdmissionResult) -> list[Check]:
    return [
        _idle_check(r),
        *(_light_check(r, run) for run in r.tenants if run.name != SOLO),
        *(c for load in sorted({run.load for run in r.steady}) for c in _steady_checks(r, load)),
        _critical_check(r),
        _late_check(r),
        _wait_check(r),
        _cpu_check(r),
    ]


def _count_check(name: str, count: int, of: int, detail: str = "") -> Check:
    ok = count == 0 and of > 0
    return Check(S, name, float(count), 0.0, math.nan, "", "0", ok, f"of {of}{detail}")


def _idle_check(r: AdmissionResult) -> Check:
    got = [s for _, _, s in r.idle.samples]
    detail = f"; answers neither 200 nor 429: {statuses(got)}"
    return _count_check(
        f"{S}: refusals of an idle sequential client", refused(got), len(got), detail
    )


def _light_check(r: AdmissionResult, run: TenantRun) -> Check:
    solo = attainment(tenant_samples(r.tenants[0], "light"))
    beside = attainment(tenant_samples(run, "light"))
    delta = (solo - beside) * 100
    return Check(
        S,
        f"{S}: light tenant's attainment, points below solo ({run.name})",
        delta,
        LIGHT_POINTS,
        delta / LIGHT_POINTS,
        "points",
        f"<= {LIGHT_POINTS:g} points",
        not math.isnan(delta) and delta <= LIGHT_POINTS,
        f"solo {_pct(solo)}, beside {_pct(beside)}",
    )


def _steady_checks(r: AdmissionResult, load: float) -> list[Check]:
    on = next(run for run in r.steady if run.load == load and run.flow)
    off = next(run for run in r.steady if run.load == load and not run.flow)
    a_on, a_off = attainment(on.samples), attainment(off.samples)
    delta = (a_off - a_on) * 100
    return [
        _count_check(
            f"{S}: refusals at {load:g}x of a mixed trace", refused(on.samples), len(on.samples)
        ),
        Check(
            S,
            f"{S}: attainment at {load:g}x, points below admission off",
            delta,
            0.0,
            math.nan,
            "points",
            "<= 0 points",
            not math.isnan(delta) and delta <= 0.0,
            f"flow control {_pct(a_on)}, off {_pct(a_off)}",
        ),
    ]


def _critical_check(r: AdmissionResult) -> Check:
    met, n, low, high = critical_interval(r.bursts)
    att = met / n if n else math.nan
    return Check(
        S,
        f"{S}: critical class's attainment during the {b.BURST_TIMES:g}x burst",
        att * 100,
        CRITICAL_ATTAINMENT * 100,
        att / CRITICAL_ATTAINMENT,
        "%",
        f">= {CRITICAL_ATTAINMENT * 100:g}%",
        bool(n) and att >= CRITICAL_ATTAINMENT,
        f"{met} of {n} critical requests in {len(r.bursts)} seeds' burst windows; 95% "
        f"interval {_pct(low)} to {_pct(high)}",
    )


def _late_check(r: AdmissionResult) -> Check:
    samples = [s for run in r.bursts for s in run.samples]
    shed = [s.seconds for s in samples if s.status == 429]
    detail = f" refusals; the latest {max(shed) * 1000:.0f} ms after sending" if shed else ""
    return _count_check(
        f"{S}: refusals issued at or after their request's deadline (burst)",
        late_refusals(samples),
        len(shed),
        detail,
    )


def _wait_check(r: AdmissionResult) -> Check:
    p99 = r.burst.wait_p99_le_s
    deadline_s = b.BUDGET_MS / 1000 - b.engine_latency_s(1)
    return Check(
        S,
        f"{S}: p99 queue wait during the burst (histogram bucket bound)",
        p99 * 1000,
        WAIT_BUCKET_S * 1000,
        p99 / WAIT_BUCKET_S,
        "ms",
        f"<= {WAIT_BUCKET_S * 1000:g} ms (the bucket of the {deadline_s * 1000:.0f} ms deadline)",
        not math.isnan(p99) and p99 <= WAIT_BUCKET_S,
        f"{r.burst.queued:.0f} requests queued, mean wait {r.burst.wait_mean_s * 1000:.0f} ms",
    )


def _cpu_check(r: AdmissionResult) -> Check:
    per = cpu_per_queued_s(r.burst, r.burst_queue_off)
    return Check(
        S,
        f"{S}: router CPU per queued request (against FLOW_QUEUE=false)",
        per * 1000,
        CPU_PER_QUEUED_S * 1000,
        per / CPU_PER_QUEUED_S,
        "ms",
        f"<= {CPU_PER_QUEUED_S * 1000:g} ms",
        not math.isnan(per) and per <= CPU_PER_QUEUED_S,
        f"router CPU {r.burst.router_cpu_s:.2f} s queued, {r.burst_queue_off.router_cpu_s:.2f}"
        f" s refusing at once, {r.burst.queued:.0f} queued",
    )
