"""Turn measured results into target checks: figure, baseline, ratio, target, pass/fail.

PURE: no I/O. A target whose figure could not be measured fails with the reason; nothing
here ever passes a target by default.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from bench.common.check import Check
from bench.common.stats import median_low, ratio
from bench.overhead.ab import Figure, requests_per_cpu_s, requests_per_s
from bench.overhead.decision import SpeedResult
from bench.overhead.memory import MemoryResult
from bench.overhead.section import TargetRun
from bench.overhead.wrk import ClosedLoopResult


def _run(runs: Sequence[TargetRun], name: str, stream: bool) -> TargetRun | None:
    """The first (full) measurement of a target."""
    return next(
        (
            r
            for r in runs
            if r.target == name and r.stream == stream and not r.error and not r.round
        ),
        None,
    )


def _rounds(runs: Sequence[TargetRun], name: str, stream: bool) -> dict[int, TargetRun]:
    """Every closed-loop measurement of a target, by round."""
    return {r.round: r for r in runs if r.target == name and r.stream == stream and not r.error}


def _mode(stream: bool) -> str:
    return "streaming" if stream else "non-streaming"


Cell = tuple[float, float, float, int]  # ratio, Gearbox figure, minimal figure, connections


def _worst_cells(
    runs: Sequence[TargetRun], stream: bool, figure: Callable[[ClosedLoopResult], float | None]
) -> list[Cell]:
    """Per round in which both were measured: the worst Gearbox/minimal ratio over the
    connection counts, with its figures."""
    gb, mp = _rounds(runs, "gearbox", stream), _rounds(runs, "minimal", stream)
    worst = []
    for round_ in sorted(gb.keys() & mp.keys()):
        cells = []
        for g in gb[round_].closed:
            m = mp[round_].closed_at(g.connections)
            gv, mv = figure(g), figure(m) if m else None
            if gv and mv:
                cells.append((gv / mv, gv, mv, g.connections))
        if cells:
            worst.append(min(cells))
    return worst


def _median_ratio_check(
    name: str, unit: str, runs: Sequence[TargetRun], stream: bool, figure: Figure
) -> Check:
    worst = _worst_cells(runs, stream, figure)
    if not worst:
        return Check(
            "overhead", name, math.nan, math.nan, math.nan, unit, ">= 0.60", False, "not measured"
        )
    ratio_, g, m, _ = sorted(worst)[(len(worst) - 1) // 2]  # the median run
    each = ", ".join(f"{w[0]:.3f} ({w[3]} conns)" for w in worst)
    return Check(
        "overhead",
        name,
        g,
        m,
        ratio_,
        unit,
        ">= 0.60",
        ratio_ >= 0.60,
        f"median of {len(worst)} runs (worst connection count each): {each}",
    )


def throughput_vs_minimal(runs: Sequence[TargetRun], stream: bool) -> Check:
    """The median over runs of the worst ratio over the connection counts both measured."""
    name = f"Gearbox throughput / minimal aiohttp proxy ({_mode(stream)}, worst of 1/32/64 conns)"
    return _median_ratio_check(name, "req/s", runs, stream, requests_per_s)


def per_cpu_vs_minimal(runs: Sequence[TargetRun], stream: bool) -> Check:
    """The same comparison per busy CPU-second of the proxy (1e6 / CPU us per request): what
    one core would serve, unmoved by other processes sharing the machine."""
    name = f"Gearbox req per CPU-second / minimal aiohttp proxy ({_mode(stream)}, worst conns)"
    return _median_ratio_check(name, "req/CPU-s", runs, stream, requests_per_cpu_s)


def _added_p99(run: TargetRun, direct: ClosedLoopResult, connections: int) -> float | None:
    found = run.closed_at(connections)
    return None if found is None else found.p99_ms - direct.p99_ms


def p99_at_one_connection(runs: Sequence[TargetRun], stream: bool) -> Check:
    """Gearbox's added p99 at one connection (closed loop, minus direct-to-nginx) against the
    minimal proxy's, each the median over runs."""
    name = f"Gearbox added p99 at 1 connection / minimal proxy's ({_mode(stream)})"
    direct = _run(runs, "direct", stream)
    d = direct.closed_at(1) if direct else None
    if d is None:
        return Check(
            "overhead", name, math.nan, math.nan, math.nan, "ms", "<= 2x", False, "not measured"
        )
    added = {}
    for target in ("gearbox", "minimal"):
        cells = [r.closed_at(1) for r in _rounds(runs, target, stream).values()]
        added[target] = [c.p99_ms - d.p99_ms for c in cells if c is not None]
    if not added["gearbox"] or not added["minimal"]:
        return Check(
            "overhead", name, math.nan, math.nan, math.nan, "ms", "<= 2x", False, "not measured"
        )
    g, m = median_low(added["gearbox"]), median_low(added["minimal"])
    r = ratio(g, m)
    detail = (
        f"median of {len(added['gearbox'])} runs each; direct p99 {d.p99_ms:.2f} ms; "
        f"Gearbox p99 {g + d.p99_ms:.2f} ms, minimal {m + d.p99_ms:.2f} ms"
    )
    return Check("overhead", name, g, m, r, "ms", "<= 2x", r <= 2.0, detail)


def added_latency(runs: Sequence[TargetRun], stream: bool, rate: float, q: str) -> Check:
    """Gearbox minus direct at the same open-loop rate; q is 'p50' or 'p99'."""
    limit_ms = 1.0 if q == "p50" else 5.0
    name = f"Gearbox added {q} latency at {rate:g} req/s open loop ({_mode(stream)})"
    gb, direct = _run(runs, "gearbox", stream), _run(runs, "direct", stream)
    g = gb.open_at(rate) if gb else None
    d = direct.open_at(rate) if direct else None
    if g is None or d is None:
        why = "not measured"
        if gb and rate in gb.skipped_rates_rps:
            why = "Gearbox cannot sustain this rate (above 80% of its closed-loop capacity)"
        return Check(
            "overhead", name, math.nan, math.nan, math.nan, "ms", f"<= {limit_ms:g} ms", False, why
        )
    gv, dv = (g.p50_ms, d.p50_ms) if q == "p50" else (g.p99_ms, d.p99_ms)
    added = gv - dv
    ok = added <= limit_ms and g.errors == 0
    detail = f"Gearbox {q} {gv:.2f} ms vs direct {dv:.2f} ms; errors {g.errors}"
    return Check(
        "overhead", name, added, dv, ratio(gv, dv), "ms", f"<= {limit_ms:g} ms", ok, detail
    )


def versus_litellm(runs: Sequence[TargetRun], stream: bool, connections: int = 64) -> Check:
    """Gearbox throughput over the better of the two LiteLLM set-ups, same core, same load."""
    name = f"Gearbox throughput / LiteLLM proxy ({_mode(stream)}, {connections} conns)"
    gb = _run(runs, "gearbox", stream)
    g = gb.closed_at(connections) if gb else None
    best = None
    for lite in ("litellm", "litellm-latency"):
        run = _run(runs, lite, stream)
        cell = run.closed_at(connections) if run else None
        if cell is not None and (best is None or cell.requests_per_s > best.requests_per_s):
            best = cell
    if g is None or best is None:
        return Check(
            "overhead", name, math.nan, math.nan, math.nan, "req/s", ">= 20x", False, "not measured"
        )
    r = ratio(g.requests_per_s, best.requests_per_s)
    return Check(
        "overhead",
        name,
        g.requests_per_s,
        best.requests_per_s,
        r,
        "req/s",
        ">= 20x",
        r >= 20.0,
        "baseline = the faster LiteLLM set-up",
    )


def overhead_checks(runs: Sequence[TargetRun], rate: float = 1000.0) -> list[Check]:
    checks = []
    for stream in (False, True):
        checks.append(throughput_vs_minimal(runs, stream))
        checks.append(per_cpu_vs_minimal(runs, stream))
        checks.append(p99_at_one_connection(runs, stream))
        checks.append(added_latency(runs, stream, rate, "p50"))
        checks.append(added_latency(runs, stream, rate, "p99"))
        checks.append(versus_litellm(runs, stream))
    return checks


def speed_check(results: Sequence[SpeedResult], section: str, size: str, limit_us: float) -> Check:
    label = "choose_route" if section == "choose_route" else "classifier"
    name = f"{label} median time, {size}"
    found = next((r for r in results if r.section == section and r.size == size), None)
    if found is None:
        return Check(
            "decision",
            name,
            math.nan,
            limit_us,
            math.nan,
            "us",
            f"<= {limit_us:g} us",
            False,
            "not measured",
        )
    return Check(
        "decision",
        name,
        found.median_us,
        limit_us,
        found.median_us / limit_us,
        "us",
        f"<= {limit_us:g} us",
        found.median_us <= limit_us,
        "baseline = the target; ratio = share of it used",
    )


def decision_checks(results: Sequence[SpeedResult]) -> list[Check]:
    return [
        speed_check(results, "choose_route", "50 pairs", 20.0),
        speed_check(results, "classify", "4 KB", 50.0),
    ]


def memory_check(m: MemoryResult) -> Check:
    after, before = m.rss_after_bytes / 2**20, m.rss_before_bytes / 2**20
    return Check(
        "memory",
        f"data-plane RSS growth over {m.requests:,} requests",
        after,
        before,
        after / before,
        "MiB",
        "<= 1.10 (growth <= 10%)",
        after / before <= 1.10 and m.errors == 0,
        f"errors {m.errors}; fds {m.fds_before} -> {m.fds_after}",
    )


def _throughput_note(
    runs: Sequence[TargetRun], stream: bool, names: tuple[str, str], what: str
) -> str | None:
    """`what` + the throughput ratio of run names[0] over names[1] per connection count."""
    top, base = _run(runs, names[0], stream), _run(runs, names[1], stream)
    if top is None or base is None:
        return None
    cells = [
        f"{t.connections} conns x{ratio(t.requests_per_s, b.requests_per_s):.2f}"
        for t in top.closed
        if (b := base.closed_at(t.connections)) is not None
    ]
    return f"{what}, {_mode(stream)} throughput: " + ", ".join(cells) if cells else None


def uvloop_notes(runs: Sequence[TargetRun]) -> list[str]:
    """What uvloop gives the data plane, and Gearbox against the minimal proxy on the same
    loop (measured, not targets)."""
    notes = []
    for stream in (False, True):
        for names, what in (
            (("gearbox", "gearbox-asyncio"), "uvloop vs asyncio, Gearbox"),
            (("minimal-uvloop", "minimal"), "uvloop vs asyncio, minimal aiohttp proxy"),
            (("gearbox", "minimal-uvloop"), "Gearbox / minimal aiohttp proxy, both on uvloop"),
        ):
            note = _throughput_note(runs, stream, names, what)
            if note is not None:
                notes.append(note)
    return notes
