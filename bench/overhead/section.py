"""Section 1: proxy overhead. Same nginx backend, same load generators, same pinning; each
target measured closed loop (wrk at 1/32/64 connections) and open loop (fixed rates), with
and without streaming. The targets the throughput ratios and the A/B rows compare (the
minimal proxy, Gearbox and its A/B variants) are measured closed loop `repeats` times, in
rounds (each target once per round, a fresh process each time), so a ratio is the median of
runs taken apart in time rather than one lucky (or unlucky) run."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TypeVar

from bench.common.backend import run_nginx
from bench.common.machine import Cores, Pinning, pinned
from bench.common.processes import cpu_seconds
from bench.common.targets import (
    AB_ROWS,
    GEARBOX_PAIRS,
    REQUEST_HEADERS,
    TARGETS,
    Endpoint,
    RunContext,
    Target,
    exported_spans,
)
from bench.common.targets import request_body as make_body
from bench.overhead.openloop import OpenLoopResult
from bench.overhead.wrk import ClosedLoopResult, lua_script, run_wrk

CHAT_PATH = "/v1/chat/completions"
CAPACITY_SHARE = 0.8  # open-loop rates above this share of closed-loop capacity are skipped
REPEATED = ("minimal", "gearbox", *(ab.target for ab in AB_ROWS))


@dataclass(frozen=True, slots=True)
class OverheadSettings:
    targets: tuple[str, ...] = tuple(t.name for t in TARGETS)
    connections: tuple[int, ...] = (1, 32, 64)
    rates_rps: tuple[float, ...] = (200.0, 500.0, 1000.0, 2000.0)
    streams: tuple[bool, ...] = (False, True)
    closed_s: float = 8.0
    open_s: float = 8.0
    warmup_s: float = 2.0
    repeats: int = 3  # closed-loop rounds of the REPEATED targets (open loop: the first only)


@dataclass(frozen=True, slots=True)
class TargetRun:
    target: str
    label: str
    stream: bool
    closed: tuple[ClosedLoopResult, ...] = ()
    open: tuple[OpenLoopResult, ...] = ()
    skipped_rates_rps: tuple[float, ...] = ()
    error: str | None = None
    notes: tuple[str, ...] = field(default=())
    round: int = 0  # 0: the full measurement; 1, 2...: closed loop again, later in the run

    def closed_at(self, connections: int) -> ClosedLoopResult | None:
        return next((r for r in self.closed if r.connections == connections), None)

    def open_at(self, rate: float) -> OpenLoopResult | None:
        return next((r for r in self.open if r.rate_rps == rate), None)


def verify(base_url: str, target: Target, stream: bool) -> None:
    """One request before loading a target: a 200 with the backend's answer (and, for
    Gearbox, a route header), so a benchmark never measures fast errors."""
    req = urllib.request.Request(
        base_url + CHAT_PATH,
        data=make_body(target.model, stream),
        headers={"Content-Type": "application/json", **REQUEST_HEADERS},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        body = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"{target.name}: status {resp.status}")
        marker = b"[DONE]" if stream else b"chatcmpl-bench"
        if marker not in body:
            raise RuntimeError(f"{target.name}: unexpected body {body[:200]!r}")
        if target.expects_route_header and not resp.headers.get("X-Route-Pair"):
            raise RuntimeError(f"{target.name}: no X-Route-Pair header")


def run_open_loop_process(
    url: str, body_file: Path, rate: float, duration_s: float, cpus: Cores
) -> OpenLoopResult:
    args = [sys.executable, "-m", "bench.overhead.openloop", "--url", url, "--rate", str(rate)]
    args += ["--duration-s", str(duration_s), "--body-file", str(body_file)]
    args += [arg for k, v in REQUEST_HEADERS.items() for arg in ("--header", f"{k}: {v}")]
    out = subprocess.run(
        pinned(args, cpus), capture_output=True, text=True, check=False, timeout=duration_s + 90
    )
    if out.returncode != 0:
        raise RuntimeError(f"open-loop generator failed: {out.stderr[-2000:]}")
    return OpenLoopResult(**json.loads(out.stdout.strip().splitlines()[-1]))


R = TypeVar("R", ClosedLoopResult, OpenLoopResult)


def with_cpu(pid: int | None, load: Callable[[], R]) -> R:
    """Run `load` and attach the proxy's CPU time per answered request."""
    if pid is None:
        return load()
    before = cpu_seconds(pid)
    result = load()
    if isinstance(result, ClosedLoopResult):
        answered = result.requests
    else:  # the generator's warm-up requests used the proxy's CPU too
        answered = result.completed + result.warmup_sent
    used = cpu_seconds(pid) - before
    return replace(result, cpu_us_per_request=used / answered * 1e6 if answered else None)


def _measure(
    endpoint: Endpoint, target: Target, ctx: RunContext, s: OverheadSettings, round_: int
) -> TargetRun:
    base_url, pid = endpoint.url, endpoint.pid
    body = make_body(target.model, ctx.stream)
    script = lua_script(body, REQUEST_HEADERS, CHAT_PATH)
    aux = ctx.pinning.aux
    run_wrk(base_url, script, 32, s.warmup_s, aux, ctx.workdir)  # warm-up, discarded
    closed = tuple(
        with_cpu(pid, partial(run_wrk, base_url, script, c, s.closed_s, aux, ctx.workdir))
        for c in s.connections
    )
    if round_:
        return TargetRun(target.name, target.label, ctx.stream, closed, round=round_)
    capacity = max(r.requests_per_s for r in closed)
    body_file = ctx.workdir / "body.json"
    body_file.write_bytes(body)
    opened, skipped = [], []
    for rate in s.rates_rps:
        if rate > CAPACITY_SHARE * capacity:
            skipped.append(rate)
            continue
        load = partial(run_open_loop_process, base_url + CHAT_PATH, body_file, rate, s.open_s, aux)
        opened.append(with_cpu(pid, load))
    spans = exported_spans(ctx)
    notes = (spans,) if spans else ()
    return TargetRun(
        target.name, target.label, ctx.stream, closed, tuple(opened), tuple(skipped), notes=notes
    )


def run_target(target: Target, ctx: RunContext, s: OverheadSettings, round_: int = 0) -> TargetRun:
    mode = "streaming" if ctx.stream else "non-streaming"
    print(f"  -> {target.label}, {mode}{f', round {round_ + 1}' if round_ else ''}", flush=True)
    try:
        with target.start(ctx) as endpoint:
            verify(endpoint.url, target, ctx.stream)
            return _measure(endpoint, target, ctx, s, round_)
    except (RuntimeError, OSError, subprocess.SubprocessError) as err:
        print(f"     FAILED: {err}", flush=True)
        error = str(err)[-1500:]
        return TargetRun(target.name, target.label, ctx.stream, error=error, round=round_)


def run_overhead(s: OverheadSettings, pinning: Pinning, workdir: Path) -> list[TargetRun]:
    chosen: Sequence[Target] = [t for t in TARGETS if t.name in s.targets]
    runs: list[TargetRun] = []
    with run_nginx(workdir / "nginx", GEARBOX_PAIRS, pinning.aux) as backend:
        for stream in s.streams:
            for round_ in range(max(1, s.repeats)):
                for target in chosen:
                    if round_ and target.name not in REPEATED:
                        continue
                    where = workdir / f"{target.name}-{round_}"
                    ctx = RunContext(backend, pinning, where, stream)
                    runs.append(run_target(target, ctx, s, round_))
    return runs
