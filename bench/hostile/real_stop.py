"""A stopped real vLLM engine with canary items on and off: when is its client released?

`python -m bench.hostile.real_stop [--runs 3] [--canary-share S] [--out DIR]`
(docs/reliability.md, "Accuracy evidence (issue 36, finding 3)"). One real engine
(gemma-3-270m bf16 on the CPU, as `make demo` starts it), profiled briefly and published
through a real control plane and Redis; then, per run, a fresh data plane with canary items
at their defaults (on) or at 0 (off), alternating. With canaries on, the run waits until the
data plane has had a canary item answered and the engine's own `/metrics` shows a request
running or waiting (an item at the engine: nothing else is sent to it); then the engine's API
server is stopped (SIGSTOP: no byte, no `/metrics`), one ordinary streamed completion is sent
through the data plane, and the seconds until its answer (a 504, or a 429 from the queue) are
timed; the engine is continued (SIGCONT) and must answer again before the next run. The
simulator's reproduction (tests/hostile/test_canary_load.py) expects about 7.3 s either way.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from demo.engine_check import check_engines
from demo.fleet import ENGINES_CLI, check_engine_memory, fleet_pair, launch_engines
from demo.profiling import EVALSETS, Sweep, profile_pair
from demo.stack import (
    fetch_text,
    publish_table,
    start_control_plane,
    start_data_plane,
    start_redis,
)

SWEEP = Sweep("1,2", "16,64", "8", requests_per_level=3, warmup=1, parallel=1)
EVAL_ITEMS = 12  # the first items of the shipped eval sets: enough to publish a table
CANARY_WAIT_S = 240.0  # the first canary item answered, at most (a CPU engine: 3-9 a minute)
_QUEUE = ("vllm:num_requests_running", "vllm:num_requests_waiting")
ASK = {"model": "auto", "prompt": "One, two, three, four,", "max_tokens": 4, "stream": True}


@dataclass(frozen=True, slots=True)
class Run:
    canaries: bool
    status: int
    released_s: float
    canary_items: float  # items the data plane had counted before the stop
    canary_errors: float  # items counted as errors (no answer) from the stop to the release

    def line(self) -> str:
        on = "on " if self.canaries else "off"
        return (
            f"canaries {on}  client answered {self.status} after {self.released_s:5.1f} s"
            f"  ({self.canary_items:g} canary items counted before the stop, "
            f"{self.canary_errors:g} given up on by the release)"
        )


def _evalset(path: Path) -> Path:
    lines = [line for f in EVALSETS for line in f.read_text().splitlines() if line.strip()]
    path.write_text("\n".join(lines[:EVAL_ITEMS]) + "\n")
    return path


def _canary_items(text: str, *outcomes: str) -> float:
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "gearbox_canary_items_total" and (
                not outcomes or sample.labels.get("outcome") in outcomes
            ):
                total += sample.value
    return total


async def _until(check: Callable[[], Awaitable[bool]], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if await check():
                return
        except (aiohttp.ClientError, TimeoutError):
            pass
        await asyncio.sleep(1.0)
    raise RuntimeError(f"{what}: not within {timeout_s:g} s")


async def _stream(url: str) -> tuple[int, float]:
    timeout = aiohttp.ClientTimeout(total=300)
    started = time.monotonic()
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.post(f"{url}/v1/completions", json=ASK) as answer,
    ):
        await answer.read()
        return answer.status, time.monotonic() - started


async def _engine_queue(engine_url: str, model: str) -> float:
    """Requests running or waiting at the engine (its own /metrics)."""
    text = await fetch_text(f"{engine_url}/metrics")
    queued = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in _QUEUE and sample.labels.get("model_name") in (None, model):
                queued += sample.value
    return queued


async def _engine_answers(engine_url: str, model: str) -> bool:
    body = {"model": model, "prompt": "Hi", "max_tokens": 1}
    timeout = aiohttp.ClientTimeout(total=30)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.post(f"{engine_url}/v1/completions", json=body) as answer,
    ):
        return answer.status == 200


async def _one_run(redis_url: str, logs: Path, engine: tuple[int, str, str], on: bool) -> Run:
    pid, engine_url, model = engine
    with ExitStack() as plane:
        dp_url, _ = await start_data_plane(plane, redis_url, logs, None if on else 0.0)

        async def at_engine() -> bool:
            answered = _canary_items(await fetch_text(f"{dp_url}/metrics"), "right", "wrong")
            return answered >= 1 and await _engine_queue(engine_url, model) >= 1

        if on:  # stopped with an item at the engine (its own queue), after one answered
            await _until(at_engine, CANARY_WAIT_S, "a canary item answered, one at the engine")
        before = await fetch_text(f"{dp_url}/metrics")
        os.kill(pid, signal.SIGSTOP)
        try:
            status, released_s = await _stream(dp_url)
            after = await fetch_text(f"{dp_url}/metrics")
        finally:
            os.kill(pid, signal.SIGCONT)
        await _until(lambda: _engine_answers(engine_url, model), 120.0, "the engine again")
    errors = _canary_items(after, "error") - _canary_items(before, "error")
    return Run(on, status, released_s, _canary_items(before), errors)


async def measure(out: Path, runs: int) -> list[Run]:
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    results: list[Run] = []
    with ExitStack() as children:
        redis_url = await start_redis(children, logs)
        started = launch_engines(children, ("bf16",), logs, 1)
        working, dropped = await check_engines(started, 600.0)
        if dropped or not working:
            raise SystemExit("; ".join(d.line() for d in dropped) or "no engine")
        pair = fleet_pair(working[0])
        cp_url, token = await start_control_plane(children, redis_url, logs)
        sweep = replace(SWEEP, evalsets=(_evalset(out / "evals.jsonl"),))
        await profile_pair(pair, sweep, cp_url, token, out)
        await publish_table(cp_url, token)
        engine = (working[0].engine.child.process.pid, pair.url, pair.served_name)
        for index in range(2 * runs):
            run = await _one_run(redis_url, logs, engine, on=index % 2 == 0)
            print(run.line(), flush=True)
            results.append(run)
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs with canaries on, and off")
    parser.add_argument("--out", type=Path, default=None, help="logs and profiles (a temp dir)")
    parser.add_argument(
        "--canary-share",
        type=float,
        default=None,
        help="the data planes' FEEDBACK_CANARY_CAPACITY_SHARE (default: theirs, 0.02); 1 lets "
        "items run at up to 240 a minute, so some wait at the engine when it stops",
    )
    args = parser.parse_args(argv)
    if args.canary_share is not None:  # the data planes inherit this process's environment
        os.environ["GEARBOX_DP_FEEDBACK_CANARY_CAPACITY_SHARE"] = f"{args.canary_share:g}"
    out = args.out or Path(tempfile.mkdtemp(prefix="gearbox-real-stop-"))
    problem = check_engine_memory(1, 1)
    if problem is not None:
        raise SystemExit(problem)
    setup = [sys.executable, str(ENGINES_CLI), "setup", "--variants", "bf16"]
    subprocess.run(setup, check=True, capture_output=True, timeout=1500)
    runs = asyncio.run(measure(out, args.runs))
    print(json.dumps([asdict(r) for r in runs]))


if __name__ == "__main__":
    main()
