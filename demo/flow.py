"""The demo, start to end: engines -> redis -> control plane -> profiles -> table -> data plane
-> mixed workload -> report. Everything it started is stopped on the way out (Ctrl-C too).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from prometheus_client.parser import text_string_to_metric_families

from contracts.profile_report import ProfileReport
from demo.engine_check import Dropped, require_two
from demo.fleet import (
    FleetPair,
    check_engine_memory,
    engine_capabilities,
    run_engine_setup,
    start_real_engines,
    start_simulated_fleet,
)
from demo.plot import plot_report
from demo.processes import StartupError
from demo.profiling import (
    HOLDOUT,
    REAL_SWEEP,
    SIM_SWEEP,
    Sweep,
    eval_lines,
    profile_fleet,
    size_work,
    sized_sweep,
)
from demo.replay import make_client, replay
from demo.report import (
    breakers_from_metrics,
    build_report,
    costs_from_metrics,
    refits_from_tables,
    render_report,
    report_json,
)
from demo.sizing import SIZES, TARGET_S, pick_size
from demo.stack import (
    KEY_PREFIX,
    Stack,
    fetch_json,
    fetch_text,
    publish_table,
    put_floors,
    start_control_plane,
    start_data_plane,
    start_redis,
)
from demo.variants import DEMO_VARIANTS, REAL_VARIANTS, plan_variants, replacement
from demo.workload import build_jobs, load_items, team_floors

Mode = Literal["real", "sim"]
# Canary items per pair per minute beside real CPU engines. The default (240 items of up to 8
# tokens a minute: 32 tokens a second per engine) is more decoding than a CPU engine of the
# demo does in a second (its smoke step prints its rate), so it would take the engines from
# the replay; 6 a minute shows them working without deciding anything in the demo's minutes.
# The simulated fleet gets 30 a minute per pair: it answers the shipped items from its answer
# keys, but its five engines and the router share this machine's cores, and the default (240 a
# pair, 20 items a second in all) is more traffic than the 40-request replay; with it,
# test_demo_sim got 1-3 flow-control 429s in 3 of 7 fresh-clone make test runs (the engines'
# process slowed, not the engines' model).
REAL_CANARY_PER_MINUTE = 6.0
SIM_CANARY_PER_MINUTE = 30.0
KV_GIB = 1
SIM_REQUESTS = 400
NO_MEMORY = 3


@dataclass(frozen=True, slots=True)
class DemoOptions:
    mode: Mode
    out_dir: Path
    requests: int | None  # None: sized to the machine (real; demo.sizing)
    concurrency: int
    loose_budget_s: float
    keep_up: bool = False
    seed: int = 7


def step(title: str) -> None:
    print(f"\n== {title}", flush=True)


async def start_fleet(
    opts: DemoOptions, children: ExitStack, logs: Path
) -> tuple[list[FleetPair], list[Dropped]]:
    """The pairs to profile, and the variants dropped on the way (with the reason)."""
    if opts.mode == "sim":
        step(
            "start the engine simulator (python -m simulator serve --fleet examples/sim-fleet.yaml)"
        )
        return await start_simulated_fleet(children, logs), []
    step("engine set-up (python3 infra/engines/engines.py setup; cached after the first run)")
    await run_engine_setup(DEMO_VARIANTS)
    step("what this machine serves (python3 infra/engines/engines.py capabilities)")
    caps = await engine_capabilities(tuple(REAL_VARIANTS))
    problems: dict[str, str | None] = caps["variants"]
    print(f"  {caps['cpu']}: ISA {caps['isa']}, vLLM kernel library {caps['kernel_library']}")
    plan = plan_variants(DEMO_VARIANTS, problems)
    for line in [d.line() for d in plan.dropped] + list(plan.notes):
        print(line, flush=True)
    hardware = f"{os.cpu_count()}-vCPU {caps['cpu']} ({caps['isa']}), vLLM CPU"
    fleet, dropped = await _start_checked(children, plan.start, logs, hardware)
    stand_ins: list[str] = []
    for gone in dropped:
        stand_in, note = replacement(gone.variant, problems, [*plan.start, *stand_ins])
        print(note, flush=True)
        if stand_in is not None:
            stand_ins.append(stand_in)
    if stand_ins:
        more, lost = await _start_checked(children, tuple(stand_ins), logs, hardware)
        fleet, dropped = fleet + more, dropped + lost
    require_two(len(fleet), [*plan.dropped, *dropped])
    return fleet, [*plan.dropped, *dropped]


def size_real_run(opts: DemoOptions, fleet: list[FleetPair], elapsed_s: float) -> tuple[Sweep, int]:
    """The profile's sweep and the replay's size, from the smoke completions' speed, so the
    demo ends about TARGET_S after it started (demo.sizing); printed with the estimate."""
    step(f"size the profiles and the replay to this machine's speed (target {TARGET_S / 60:.0f} "
         f"min in all, {elapsed_s:.0f} s spent)")  # fmt: skip
    lines = eval_lines(REAL_SWEEP.evalsets)
    sizing = pick_size(
        [p.smoke_tokens_per_s for p in fleet],
        elapsed_s,
        lambda size: size_work(REAL_SWEEP, lines, size),
        REAL_SWEEP.parallel,
        replay_requests=opts.requests,
    )
    size = SIZES[0] if sizing is None else sizing.size
    print("  no smoke speed measured: full size" if sizing is None else sizing.line(len(fleet)),
          flush=True)  # fmt: skip
    sweep = sized_sweep(REAL_SWEEP, lines, size, opts.out_dir / "evalsets")
    return sweep, opts.requests or size.replay_requests


async def _start_checked(
    children: ExitStack, variants: tuple[str, ...], logs: Path, hardware: str
) -> tuple[list[FleetPair], list[Dropped]]:
    step(f"start {len(variants)} vLLM CPU engines ({', '.join(variants)}; KV {KV_GIB:g} GiB "
         "each); each answers one completion before it is profiled")  # fmt: skip
    fleet, dropped = await start_real_engines(children, variants, logs, KV_GIB, (), hardware)
    for pair in fleet:
        print(f"  {pair.pair:28} {pair.url}  up in {pair.started_s:.0f} s, "
              f"RSS {pair.rss_bytes / 2**30:.1f} GiB, "
              f"smoke completion {pair.smoke_tokens_per_s:.1f} tok/s")  # fmt: skip
    for gone in dropped:
        print(gone.line(), flush=True)
    return fleet, dropped


def show_table(stack: Stack) -> None:
    argv = [sys.executable, "-m", "control_plane", "show", "--redis-url", stack.redis_url]
    done = subprocess.run([*argv, "--redis-key-prefix", KEY_PREFIX], capture_output=True, text=True)
    print(done.stdout if done.returncode == 0 else done.stderr, flush=True)


async def measure(
    opts: DemoOptions, stack: Stack, table: dict[str, Any], requests: int
) -> dict[str, Any]:
    """Replay the workload; return the report's JSON (also printed, written and plotted)."""
    items = load_items(HOLDOUT)  # never the items the profiles were measured on
    jobs = build_jobs(items, table, requests, opts.loose_budget_s, opts.seed)
    step(f"replay {len(jobs)} requests through the data plane with the openai client "
         f"({opts.concurrency} at a time, half streaming)")  # fmt: skip
    client = make_client(stack.data_plane_url)
    try:
        outcomes = await replay(client, jobs, opts.concurrency)
    finally:
        await client.close()
    metrics = await fetch_text(f"{stack.data_plane_url}/metrics")
    costs = costs_from_metrics(text_string_to_metric_families(metrics))
    breakers = breakers_from_metrics(text_string_to_metric_families(metrics))
    refits = await _refits_since(stack, table["version"])
    report = build_report(opts.mode, table, outcomes, costs, breakers=breakers, refits=refits)
    step("report")
    print(render_report(report), flush=True)
    data = report_json(report)
    plot = plot_report(report, opts.out_dir / "report.png")
    print(f"\nwrote {opts.out_dir / 'report.json'} and {plot}")
    return data


async def _refits_since(stack: Stack, version: int) -> dict[str, list[str]]:
    """Per pair, what the control plane's feedback loop published after table `version`."""
    cp, token = stack.control_plane_url, stack.admin_token
    history = await fetch_json(f"{cp}/v1/tables", token)
    tables = [
        await fetch_json(f"{cp}/v1/tables/{v['version']}", token)
        for v in reversed(history["versions"])
        if v["version"] > version
    ]
    return refits_from_tables(tables)


async def run_demo(opts: DemoOptions) -> int:
    """The whole flow; returns the exit code (0 ok, 3 not enough memory for real engines)."""
    started = time.monotonic()
    logs = opts.out_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    if opts.mode == "real":
        step(f"memory check for {len(DEMO_VARIANTS)} engines")
        problem = check_engine_memory(len(DEMO_VARIANTS), KV_GIB)
        if problem is not None:
            print(problem, flush=True)
            return NO_MEMORY
        print("  ok")
    with ExitStack() as children:
        fleet, dropped = await start_fleet(opts, children, logs)
        if opts.mode == "sim":
            sweep, requests = SIM_SWEEP, opts.requests or SIM_REQUESTS
        else:
            sweep, requests = size_real_run(opts, fleet, time.monotonic() - started)
        step("start redis-server, the control plane and the data plane")
        redis_url = await start_redis(children, logs)
        cp_url, token = await start_control_plane(children, redis_url, logs)
        step(f"profile {len(fleet)} pairs (python -m profiler run ... --push {cp_url})")
        reports, failed = await profile_fleet(fleet, sweep, cp_url, token, opts.out_dir)
        dropped += failed
        require_two(len(reports), dropped)
        step("publish a routing table (POST /v1/tables)")
        measured = await publish_table(cp_url, token)
        floors = team_floors(measured)
        step("set the team's floors per category (PUT /v1/policy), republish and show it")
        print("  floors (what the middle of the fleet proves at 90%): "
              + ", ".join(f"{c} {f:.2f}" for c, f in floors.items()))  # fmt: skip
        await put_floors(cp_url, token, floors)
        table = await publish_table(cp_url, token)
        canary = REAL_CANARY_PER_MINUTE if opts.mode == "real" else SIM_CANARY_PER_MINUTE
        dp_url, _ = await start_data_plane(children, redis_url, logs, canary)
        stack = Stack(redis_url, cp_url, dp_url, token)
        show_table(stack)
        data = await measure(opts, stack, table, requests)
        data["extras"] = _extras(fleet, reports, stack, time.monotonic() - started)
        data["extras"]["dropped"] = [
            {"variant": d.variant, "reason": d.reason, "log": str(d.log) if d.log else None}
            for d in dropped
        ]
        print("\ndropped: " + ("none" if not dropped else ""), flush=True)
        for gone in dropped:
            print(gone.line(), flush=True)
        (opts.out_dir / "report.json").write_text(json.dumps(data, indent=2, default=str) + "\n")
        print(f"\noperator page: {stack.operator_page_url}\n"
              f"metrics:       {dp_url}/metrics (data plane), {cp_url}/metrics (control plane)\n"
              f"router:        {dp_url}/v1 (OpenAI-compatible; model 'auto')")  # fmt: skip
        print(f"demo took {time.monotonic() - started:.0f} s")
        if opts.keep_up:
            print("everything stays up; press Ctrl-C to stop", flush=True)
            await asyncio.Event().wait()
        step("shutting down")
    return 0


def _extras(
    fleet: list[FleetPair], reports: list[ProfileReport], stack: Stack, seconds: float
) -> dict[str, Any]:
    return {
        "demo_seconds": round(seconds, 1),
        "engines": [asdict(p) for p in fleet],
        "profiles": {
            r.pair: {
                "accuracy": {a.category: a.accuracy for a in r.accuracy},
                "ttft_p95_s_c1": r.latency[0].ttft_s.p95,
                "tpot_p95_s_c1": r.latency[0].tpot_s.p95,
                "best_output_tokens_per_s": max(s.output_tokens_per_s for s in r.latency),
            }
            for r in reports
        },
        "urls": {
            "operator_page": stack.operator_page_url,
            "data_plane": stack.data_plane_url,
            "control_plane": stack.control_plane_url,
        },
    }


async def run_until_stopped(opts: DemoOptions) -> int:
    """`run_demo`, cancelled by SIGTERM or SIGINT (a process manager's stop, Ctrl-C, or a
    background job's `kill -INT`, whose SIGINT Python would otherwise ignore): the children
    it started are stopped on the way out. Exit 128 + the signal's number."""
    loop, task = asyncio.get_running_loop(), asyncio.current_task()
    assert task is not None
    caught: list[signal.Signals] = []

    def stop(sig: signal.Signals) -> None:
        if not caught:
            print(f"\n{sig.name}: stopping everything the demo started", flush=True)
        caught.append(sig)
        task.cancel()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop, sig)
    try:
        return await run_demo(opts)
    except asyncio.CancelledError:
        if not caught:
            raise
        print("stopped; everything the demo started has been stopped", flush=True)
        return 128 + caught[0].value
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


def main(opts: DemoOptions) -> int:
    try:
        return asyncio.run(run_until_stopped(opts))
    except StartupError as err:
        print(f"\ndemo failed: {err}", flush=True)
        if opts.mode == "real" and "make demo-sim" not in str(err):
            print("if the engines ran out of memory, `make demo-sim` runs the same flow on the "
                  "engine simulator", flush=True)  # fmt: skip
        return 1
