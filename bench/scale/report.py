"""The scale section's targets (figure against target, PURE) and its tables for RESULTS.md."""

from __future__ import annotations

import math

from bench.common.check import Check
from bench.scale.section import ScaleResult

SHARING_TARGET_RATIO = 0.02  # of a core per replica, at 64 replicas x 200 endpoints
REDIS_STANDALONE_TARGET = 0.25  # of redis-server's core for sharing, 64 x 200
REDIS_SHARD_TARGET = 0.50  # of each shard's core for sharing, 256 x 1,000 on 3 shards
CHOOSE_TARGET_US = 10.0  # at 200 pairs
BUILD_TARGET_S = 30.0  # at 200 pairs and 30,000 eval prompts
MEMORY_SLACK_MIB = 4.0  # beyond a limit: allocator, socket buffers, one read


def _check(name: str, figure: float, target: float, unit: str, detail: str) -> Check:
    passed = not math.isnan(figure) and figure <= target
    return Check(
        "scale",
        name,
        figure,
        target,
        figure / target,
        unit,
        f"<= {target:g} {unit}",
        passed,
        detail,
    )


def scale_checks(r: ScaleResult) -> list[Check]:
    checks = []
    sharing = next(
        (f for f in r.fleets if (f.mode, f.replicas, f.endpoints) == ("sharing", 64, 200)), None
    )
    if sharing is not None:
        measured = sharing.cpu_per_replica_ratio * 100
        detail = (
            f"CPU per exchange x the nominal {sharing.nominal_per_replica_per_s:g}/s; as "
            f"measured {measured:.2f}% at {sharing.work_per_replica_per_s:.1f}/s; "
            f"redis-server {sharing.redis_cpu_ratio * 100:.0f}% of a core; CPU: "
            + "; ".join(f"{name} {share * 100:.0f}%" for name, share in r.exchange_profile[:3])
        )
        checks.append(
            _check(
                "in-flight sharing CPU per replica, 64 x 200",
                sharing.at_nominal_ratio * 100,
                SHARING_TARGET_RATIO * 100,
                "% of a core",
                detail,
            )
        )
    checks += _redis_checks(r)
    choose = next((c for c in r.choose if c.pairs == 200), None)
    if choose is not None:
        where = "; ".join(f"{name} {share * 100:.0f}%" for name, share in r.choose_profile[:3])
        checks.append(
            _check(
                "choose_route median, 200 pairs",
                choose.median_us,
                CHOOSE_TARGET_US,
                "us",
                f"self time: {where}",
            )
        )
    build = next((b for b in r.builds if (b.pairs, b.prompts) == (200, 30_000)), None)
    if build is not None:
        detail = (
            f"CPU s (wall {build.total_s:.1f} s); classifier {build.classifier_s:.1f} s, bounds "
            f"{build.bounds_s:.2f} s, fits {build.fits_s:.2f} s; BLAS threads {build.blas_threads}"
        )
        checks.append(
            _check(
                "table build, 200 pairs x 30,000 prompts",
                build.total_cpu_s,
                BUILD_TARGET_S,
                "s",
                detail,
            )
        )
    for h in r.hostile:
        bound = h.bound_mib + MEMORY_SLACK_MIB
        detail = (
            f"limit {h.bound_mib:g} MiB + {MEMORY_SLACK_MIB:g}; {h.sent_mib:g} MiB sent; "
            f"{h.outcome}; CPU {h.cpu_s:.3f} s"
        )
        checks.append(
            _check(
                f"upstream peak RSS growth, hostile {h.case}",
                h.peak_growth_mib,
                bound,
                "MiB",
                detail,
            )
        )
    return checks


def _redis_checks(r: ScaleResult) -> list[Check]:
    """Redis's CPU for in-flight sharing at the nominal rate, per redis-server (shard)."""
    checks = []
    for cost in r.redis_costs:
        shards = len(cost.redis_cpu_per_exchange_us)
        target = REDIS_STANDALONE_TARGET if shards == 1 else REDIS_SHARD_TARGET
        where = "one redis-server" if shards == 1 else f"the busiest of {shards} shards"
        detail = (
            f"CPU per exchange x the nominal {cost.nominal_per_s:g}/s; {cost.groups} group(s); "
            f"achieved {cost.exchanges_per_s:.0f}/s (time slowed {cost.dilation:.1f}x); "
            f"per replica {cost.replica_at_nominal * 100:.2f}%"
        )
        checks.append(
            _check(
                f"Redis CPU for in-flight sharing, {cost.replicas} x {cost.endpoints:,}, {where}",
                max(cost.redis_at_nominal) * 100,
                target * 100,
                "% of a core",
                detail,
            )
        )
    return checks


def redis_cost_lines(r: ScaleResult) -> list[str]:
    lines = [
        "",
        "### Redis's CPU for in-flight sharing (`bench/scale/redis_cost.py`)",
        "",
        "| replicas x endpoints | topology | groups | exchanges/s achieved / nominal "
        "| time slowed | redis-server CPU µs per exchange, per shard (less its background) "
        "| of it in commands µs; reads per exchange "
        "| redis-server CPU at the nominal rate, per shard | CPU per replica at the nominal rate "
        "| staleness p50 / p99 / max ms, measured (at speed) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in r.redis_costs:
        per_exchange = " / ".join(f"{us:.0f}" for us in c.redis_cpu_per_exchange_us)
        if c.shards:
            per_exchange += " (" + " / ".join(f"{us:.0f}" for us in c.per_exchange_us) + ")"
        commands = " / ".join(f"{s.commands_us:.0f}; {s.reads:.2f}" for s in c.shards) or "-"
        nominal = " / ".join(f"{ratio * 100:.0f}%" for ratio in c.redis_at_nominal)
        measured = " / ".join(f"{ms:.0f}" for ms in c.staleness_ms)
        at_speed = " / ".join(f"{ms:.0f}" for ms in c.staleness_at_speed_ms)
        lines.append(
            f"| {c.replicas} x {c.endpoints:,} | {c.topology} | {c.groups} "
            f"| {c.exchanges_per_s:.0f} / {c.nominal_per_s:g} | {c.dilation:.1f}x | {per_exchange} "
            f"| {commands} | {nominal} | {c.replica_at_nominal * 100:.2f}% "
            f"| {measured} ({at_speed}) |"
        )
    return lines


def scale_lines(r: ScaleResult) -> list[str]:
    lines = [
        "## 8. Scale (`bench/scale/`)",
        "",
        "### Shared state per replica (simulated replicas on one redis-server)",
        "",
    ]
    lines += [
        "| what | replicas x endpoints | CPU per replica, measured "
        "| rate per replica measured / nominal | CPU per unit µs "
        "| CPU per replica at the nominal rate | redis-server CPU |",
        "|---|---|---|---|---|---|---|",
    ]
    for f in r.fleets:
        unit = "exchanges/s" if f.mode == "sharing" else "announcements heard/s"
        lines.append(
            f"| {f.mode} | {f.replicas} x {f.endpoints} | {f.cpu_per_replica_ratio * 100:.2f}% "
            f"| {f.work_per_replica_per_s:.1f} / {f.nominal_per_replica_per_s:g} {unit} "
            f"| {f.cpu_per_unit_us:.0f} | {f.at_nominal_ratio * 100:.2f}% "
            f"| {f.redis_cpu_ratio * 100:.1f}% |"
        )
    lines += [
        "",
        "One exchange at 64 x 200, self CPU time by where the code lives (cProfile on a CPU "
        "clock; its own overhead inflates the many small calls):",
        "",
        "| where | share |",
        "|---|---|",
        *(f"| {name} | {share * 100:.1f}% |" for name, share in r.exchange_profile),
        *redis_cost_lines(r),
        "",
        "### `choose_route` on large tables",
        "",
        "| pairs | median µs | min µs | batches x calls |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {c.pairs} | {c.median_us:.1f} | {c.min_us:.1f} | {c.batches} x {c.calls_per_batch} |"
        for c in r.choose
    ]
    lines += [
        "",
        "Self time of `choose_route` at 200 pairs (cProfile):",
        "",
        "| function | share |",
        "|---|---|",
    ]
    lines += [f"| `{name}` | {share * 100:.1f}% |" for name, share in r.choose_profile]
    lines += [
        "",
        "### Table build (`control_plane.build.table.build`)",
        "",
        "| pairs | eval prompts | build wall s | build CPU s | fits s | bounds s | classifier s "
        "| entries | BLAS threads |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {b.pairs} | {b.prompts:,} | {b.total_s:.1f} | {b.total_cpu_s:.1f} | {b.fits_s:.2f} "
        f"| {b.bounds_s:.2f} | {b.classifier_s:.1f} | {b.entries} | {b.blas_threads} |"
        for b in r.builds
    ]
    lines += [
        "",
        "### The upstream client under a hostile engine",
        "",
        "| case | engine sends MiB | peak RSS growth MiB | limit MiB | attempt CPU s | outcome |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {h.case} | {h.sent_mib:g} | {h.peak_growth_mib:.2f} | {h.bound_mib:g} "
        f"| {h.cpu_s:.3f} | {h.outcome} |"
        for h in r.hostile
    ]
    return [*lines, ""]
