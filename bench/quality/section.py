"""Section 3: routing quality on a simulated fleet profiled by the profiler.

simulator (aux core) -> profiler fleet run -> control_plane.build_table -> data plane (proxy
core, static snapshot) -> the same seeded trace replayed open loop for each policy at 1x, 2x
and 3x the nominal rate -> graded answers, cost, budget attainment, share per pair.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from bench.common.machine import Cores, Pinning, pinned
from bench.common.processes import ProcessFailedError, free_port, running
from bench.common.targets import gearbox_environment
from bench.quality import fleet as qf
from bench.quality.loop import CHECK_INTERVAL_S, FEEDBACK_INTERVAL_S, run_loop_rows
from bench.quality.replay import request_parts
from bench.quality.results import QUALITY_FIRST, PairFacts, PolicyOutcome, QualityResult
from bench.quality.score import grade
from bench.quality.static_router import choose_tier
from bench.quality.trace import TraceRequest, make_trace
from contracts.policy import load_policy
from contracts.profile_report import ProfileReport
from contracts.routing_table import RoutingTable
from control_plane.build.table import build_table

SEED = 20261122
NOMINAL_RPS = 30.0
LOADS = (1.0, 2.0, 3.0)
POLICIES = ("most-precise", "cheapest", "static-threshold", "gearbox")
# The same profiles under the quality-first objective, on a second data plane, at 1x, 2x and
# 3x (quick runs too) of a nominal rate at which the most precise 8B pair runs near its
# profiled concurrency: its shares should move down the precision ladder as the load grows.
LADDER_NOMINAL_RPS = 50.0
STATIC_TIERS = (
    f"{qf.SMALL}@awq-int4",
    f"{qf.SMALL}@int8-w8a8",
    f"{qf.SMALL}@fp16",
    qf.MOST_PRECISE,
)


def policy_models(policy: str, trace: Sequence[TraceRequest]) -> list[str]:
    """The `model` field per request: a pinned pair, the static router's tier, or `auto`."""
    choose: dict[str, Callable[[TraceRequest], str]] = {
        "most-precise": lambda r: qf.MOST_PRECISE,
        "cheapest": lambda r: qf.CHEAPEST,
        "static-threshold": lambda r: choose_tier(r.prompt, STATIC_TIERS),
        "gearbox": lambda r: "auto",
        QUALITY_FIRST: lambda r: "auto",
    }
    return [choose[policy](r) for r in trace]


@contextmanager
def simulator(
    workdir: Path, evalsets: list[Path], cpus: Cores, pairs: Sequence[qf.SimPair] = qf.PAIRS
) -> Iterator[dict[str, str]]:
    """The simulated fleet on the aux cores; yields {served name: base URL}."""
    fleet = workdir / "sim-fleet.json"
    fleet.write_text(json.dumps(qf.sim_fleet(evalsets, SEED, pairs)))
    ports = workdir / "sim-ports.json"
    args = [sys.executable, "-m", "simulator", "serve", "--fleet", str(fleet)]
    args += ["--ports-file", str(ports)]
    log = workdir / "simulator.log"
    with running(pinned(args, cpus), log) as proc:
        deadline = time.monotonic() + 60
        while not ports.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise ProcessFailedError(f"simulator did not start:\n{log.read_text()[-2000:]}")
            time.sleep(0.1)
        yield dict(json.loads(ports.read_text()))


def profile_fleet(
    workdir: Path,
    urls: dict[str, str],
    evalsets: list[Path],
    quick: bool,
    pairs: Sequence[qf.SimPair] = qf.PAIRS,
    extra_args: Sequence[str] = (),
) -> list[ProfileReport]:
    """Run `python -m profiler fleet` against the simulator; the reports it wrote
    (`extra_args`: more profiler flags, e.g. `--until-decided`)."""
    out_dir = workdir / "profiles"
    spec = workdir / "profiler-fleet.yaml"  # JSON is YAML
    spec.write_text(json.dumps(qf.profiler_fleet(urls, evalsets, out_dir, quick, pairs)))
    env = {**os.environ, "GEARBOX_PROF_EVAL_CONCURRENCY": "16"}
    args = [sys.executable, "-m", "profiler", "fleet", str(spec), "--quiet", *extra_args]
    log = workdir / "profiler.log"
    with running(args, log, env=env) as proc:
        code = proc.wait(timeout=900)
    if code != 0:
        raise RuntimeError(f"profiler fleet failed ({code}):\n{log.read_text()[-3000:]}")
    return [
        ProfileReport.model_validate_json(p.read_bytes()) for p in sorted(out_dir.glob("*.json"))
    ]


def build_routing_table(reports: list[ProfileReport], objective: str = "cost") -> RoutingTable:
    policy = load_policy({**qf.POLICY, "objective": objective})
    return build_table(reports, policy, datetime.now(UTC))


@contextmanager
def data_plane(workdir: Path, table: RoutingTable, cpus: Cores) -> Iterator[str]:
    """The data plane on the proxy core, serving `table` from a snapshot; yields its URL."""
    snapshot = workdir / "table.json"
    snapshot.write_text(table.model_dump_json())
    port = free_port()
    env = gearbox_environment(port, snapshot, None)
    args = pinned([sys.executable, "-m", "data_plane", "serve"], cpus)
    with running(args, workdir / "data-plane.log", env=env, port=port):
        yield f"http://127.0.0.1:{port}"


def check_serving(url: str, req: TraceRequest) -> None:
    """One request through the data plane before any replay, so a broken data plane is a
    section error, not a table of zeros."""
    body, headers = request_parts(req.as_dict(), "auto")
    request = urllib.request.Request(
        url + "/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **headers},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            if resp.status != 200 or not resp.headers.get("X-Route-Pair"):
                raise RuntimeError(f"data plane answered {resp.status} without a route")
    except urllib.error.HTTPError as err:
        detail = err.read()[:300].decode(errors="replace")
        raise RuntimeError(f"data plane answered {err.code}: {detail}") from err


def replay_policy(
    workdir: Path, url: str, trace: Sequence[TraceRequest], policy: str, load: float, cpus: Cores
) -> tuple[list[dict[str, object]], float]:
    """The replay's answers, and the client's worst event-loop lag in ms."""
    trace_file = workdir / "trace.jsonl"
    if not trace_file.exists():
        trace_file.write_text("".join(json.dumps(r.as_dict()) + "\n" for r in trace))
    models = workdir / f"models-{policy}.json"
    models.write_text(json.dumps(policy_models(policy, trace)))
    out = run_replay(workdir, url, (trace_file, models), f"{policy}-{load:g}x", load, cpus)
    client = json.loads(out.with_suffix(".client.json").read_text())
    results = [json.loads(line) for line in out.read_text().splitlines() if line]
    return results, float(client["max_lag_ms"])


def run_replay(
    workdir: Path, url: str, inputs: tuple[Path, Path], tag: str, load: float, cpus: Cores
) -> Path:
    """Replay the trace file against `url` with the models file (`inputs`) at `load`, pinned
    to `cpus`; returns the answers file (`replay-{tag}.jsonl`). Raises on a failed replay."""
    trace_file, models = inputs
    out = workdir / f"replay-{tag}.jsonl"
    args = [sys.executable, "-m", "bench.quality.replay", "--trace", str(trace_file)]
    args += ["--models", str(models), "--url", url + "/v1/chat/completions"]
    args += ["--load", str(load), "--out", str(out)]
    log = workdir / f"replay-{tag}.log"
    with running(pinned(args, cpus), log) as proc:
        code = proc.wait(timeout=900)
    if code != 0:
        raise RuntimeError(f"replay failed ({code}):\n{log.read_text()[-2000:]}")
    return out


def replay_ladder(
    workdir: Path,
    reports: list[ProfileReport],
    evalsets: list[Path],
    prices: dict[str, tuple[float, float]],
    pinning: Pinning,
    quick: bool,
) -> list[PolicyOutcome]:
    """Quality-first at 1x, 2x, 3x of LADDER_NOMINAL_RPS on its own data plane and trace."""
    workdir.mkdir(parents=True, exist_ok=True)
    n = 450 if quick else 1500
    trace = make_trace(qf.read_items(evalsets), qf.FLOORS, n, LADDER_NOMINAL_RPS, SEED + 1)
    table = build_routing_table(reports, "quality-first")
    outcomes = []
    with data_plane(workdir, table, pinning.proxy) as url:
        check_serving(url, trace[0])
        for load in LOADS:
            print(f"     replay {QUALITY_FIRST} at {load:g}x", flush=True)
            results, lag_ms = replay_policy(workdir, url, trace, QUALITY_FIRST, load, pinning.aux)
            rate = LADDER_NOMINAL_RPS * load
            outcome = grade(QUALITY_FIRST, load, rate, trace, results, prices)
            outcomes.append(replace(outcome, client_max_lag_ms=round(lag_ms, 1)))
    return outcomes


def _pair_facts(table: RoutingTable) -> tuple[PairFacts, ...]:
    simulated = {p.pair: dict(zip(qf.CATEGORIES, p.accuracy, strict=True)) for p in qf.PAIRS}
    return tuple(
        PairFacts(
            pair=e.pair,
            input_usd_per_mtok=e.input_usd_per_mtok,
            output_usd_per_mtok=e.output_usd_per_mtok,
            profiled_accuracy=dict(e.accuracy),
            simulated_accuracy=simulated.get(e.pair, {}),
        )
        for e in table.entries
    )


def run_quality(pinning: Pinning, workdir: Path, quick: bool) -> QualityResult:
    workdir.mkdir(parents=True, exist_ok=True)
    evalsets = qf.write_evalsets(workdir / "evals", 60 if quick else 400, SEED)
    trace = make_trace(
        qf.read_items(evalsets), qf.FLOORS, 150 if quick else 1500, NOMINAL_RPS, SEED
    )
    loads = LOADS[:2] if quick else LOADS
    with simulator(workdir, evalsets, pinning.aux) as urls:
        print("     profiling the simulated fleet", flush=True)
        reports = profile_fleet(workdir, urls, evalsets, quick)
        table = build_routing_table(reports)
        prices = {e.pair: (e.input_usd_per_mtok, e.output_usd_per_mtok) for e in table.entries}
        missing = {*STATIC_TIERS, qf.CHEAPEST} - set(prices)
        if missing:
            raise RuntimeError(f"pairs the baselines pin are not in the table: {sorted(missing)}")
        outcomes: list[PolicyOutcome] = []
        with data_plane(workdir, table, pinning.proxy) as url:
            check_serving(url, trace[0])
            for load in loads:
                for policy in POLICIES:
                    print(f"     replay {policy} at {load:g}x", flush=True)
                    results, lag_ms = replay_policy(workdir, url, trace, policy, load, pinning.aux)
                    outcome = grade(policy, load, NOMINAL_RPS * load, trace, results, prices)
                    outcomes.append(replace(outcome, client_max_lag_ms=round(lag_ms, 1)))
        outcomes += replay_ladder(workdir / "ladder", reports, evalsets, prices, pinning, quick)
        loop = run_loop_rows(
            workdir / "loop", table, trace, LOADS[:2], NOMINAL_RPS, prices, pinning
        )
    notes = (
        "Simulated time runs ~10x faster than GPUs (outputs of 8-64 tokens, ms-scale TPOT); "
        "requests carry X-Latency-Budget-Ms, X-Min-Accuracy and X-Task-Category; budgets "
        "are end-to-end, measured by the client from the scheduled send time.",
        f"Pruned (dominated) pairs: {', '.join(p.pair for p in table.pruned) or 'none'}.",
    )
    return QualityResult(
        seed=SEED,
        trace_requests=len(trace),
        nominal_rps=NOMINAL_RPS,
        most_precise_pair=qf.MOST_PRECISE,
        cheapest_pair=qf.CHEAPEST,
        pairs=_pair_facts(table),
        outcomes=tuple(outcomes),
        notes=(
            *notes,
            "Refit loop rows: the gearbox replay again on a data plane in Redis mode, loop off "
            f"(table v1), then on (checks every {CHECK_INTERVAL_S:g} s, feedback every "
            f"{FEEDBACK_INTERVAL_S:g} s, the table's refit policy); engines unchanged.",
        ),
        loop=loop,
    )
