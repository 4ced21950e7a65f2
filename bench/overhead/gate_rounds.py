"""The overhead gate's measurement (`bench/overhead/gate.py`): the minimal proxy and Gearbox
loaded side by side, at the same time, on the one core the proxy under test gets.

Per streaming mode both targets are started once, pinned to the proxy core, checked with one
request and warmed up; then in each of GATE_SETTINGS.repeats rounds, per connection count, two
wrk processes load both at once for the same seconds. Two proxies kept busy on one core share
it as the scheduler shares it, and whatever else runs on the machine in those seconds (other
tenants' work, cache pressure, a slower host) falls on both alike: the ratio of the requests
they answered is the ratio of their cost per request, which a shared machine's load moves far
less than it moves either target's own throughput (docs/benchmarks.md, "The CI overhead gate").
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from bench.common.backend import run_nginx
from bench.common.machine import Pinning
from bench.common.targets import (
    GEARBOX_PAIRS,
    REQUEST_HEADERS,
    TARGETS,
    Endpoint,
    RunContext,
    Target,
    gearbox_ab,
)
from bench.common.targets import request_body as make_body
from bench.overhead.section import CHAT_PATH, OverheadSettings, TargetRun, verify, with_cpu
from bench.overhead.wrk import ClosedLoopResult, lua_script, run_wrk

GATE_CONNECTIONS = 64
GATE_SETTINGS = OverheadSettings(
    targets=("minimal", "gearbox"),
    connections=(1, GATE_CONNECTIONS),
    rates_rps=(),
    closed_s=2.0,
    warmup_s=1.0,
    repeats=4,
)
WARMUP_CONNECTIONS = 32


@dataclass(frozen=True, slots=True)
class _Started:
    """A running target and how to load it closed loop."""

    target: Target
    endpoint: Endpoint
    ctx: RunContext

    def load(self, connections: int, duration_s: float) -> ClosedLoopResult:
        body = make_body(self.target.model, self.ctx.stream)
        script = lua_script(body, REQUEST_HEADERS, CHAT_PATH)
        args = (self.endpoint.url, script, connections, duration_s)
        return run_wrk(*args, self.ctx.pinning.aux, self.ctx.workdir)

    def measure(self, connections: int, round_: int) -> TargetRun:
        result = with_cpu(
            self.endpoint.pid, partial(self.load, connections, GATE_SETTINGS.closed_s)
        )
        t = self.target
        return TargetRun(t.name, t.label, self.ctx.stream, (result,), round=round_)


def gate_targets(slowed: bool) -> list[Target]:
    """The minimal proxy and Gearbox; `slowed`: Gearbox + a busy loop per routed request."""
    chosen = [t for t in TARGETS if t.name in GATE_SETTINGS.targets]
    if not slowed:
        return chosen
    slow = gearbox_ab(variant="slowed")
    return [replace(t, start=slow) if t.name == "gearbox" else t for t in chosen]


def run_gate(pinning: Pinning, workdir: Path, slowed: bool = False) -> list[TargetRun]:
    """Every round of both modes: one TargetRun per target, round and connection count."""
    runs: list[TargetRun] = []
    with (
        run_nginx(workdir / "nginx", GEARBOX_PAIRS, pinning.aux) as backend,
        ThreadPoolExecutor(len(GATE_SETTINGS.targets)) as pool,
    ):
        for stream in GATE_SETTINGS.streams:
            ctx = RunContext(backend, pinning, workdir, stream)
            runs += _mode_rounds(ctx, gate_targets(slowed), pool)
    return runs


def _mode_rounds(
    ctx: RunContext, targets: Sequence[Target], pool: ThreadPoolExecutor
) -> list[TargetRun]:
    s, mode = GATE_SETTINGS, "streaming" if ctx.stream else "non-streaming"
    try:
        with contextlib.ExitStack() as stack:
            started = []
            for target in targets:
                where = replace(ctx, workdir=ctx.workdir / f"{target.name}-{mode}")
                endpoint = stack.enter_context(target.start(where))
                verify(endpoint.url, target, ctx.stream)
                started.append(_Started(target, endpoint, where))
            print(f"  -> {mode}: {s.repeats} rounds, both targets at once", flush=True)
            list(pool.map(lambda t: t.load(WARMUP_CONNECTIONS, s.warmup_s), started))
            runs: list[TargetRun] = []
            for round_ in range(s.repeats):
                for conns in s.connections:
                    n = len(started)
                    runs += pool.map(_Started.measure, started, [conns] * n, [round_] * n)
            return runs
    except (RuntimeError, OSError, subprocess.SubprocessError) as err:
        print(f"     FAILED: {err}", flush=True)
        return [TargetRun(t.name, t.label, ctx.stream, error=str(err)[-1500:]) for t in targets]
