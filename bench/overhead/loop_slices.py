"""What holds the data plane's event loop under open-loop load: long loop slices by task and
garbage collections, in CPU time (issue 33, "a flat tail").

`python -m bench.overhead.loop_slices [--rate 300] [--seconds 30] [--streaming] [--env K=V]`
runs the data plane as the overhead section does (nginx backend, 12 pairs, traced, pinned;
`--env` adds a data plane setting) but through `bench.common.dp_slices` on the asyncio loop,
warms it up with wrk, sends the open-loop rate, and prints the slices of at least 1 ms of CPU
grouped by task, and the collections after the heap was frozen. CPU time, not wall time: on a
shared machine a slice's wall time is mostly other processes'.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common.backend import run_nginx
from bench.common.dp_slices import OUT_VARIABLE
from bench.common.machine import choose_pinning
from bench.common.targets import GEARBOX_PAIRS, REQUEST_HEADERS, RunContext, gearbox_process
from bench.common.targets import request_body as make_body
from bench.overhead.section import CHAT_PATH, run_open_loop_process
from bench.overhead.wrk import lua_script, run_wrk


def summary(record: dict[str, Any], skip_s: float = 0.0) -> list[str]:
    """PURE: the slices by task (count, longest, total, in ms of CPU) and the collections
    after the freeze by generation, from what `dp_slices` wrote; slices before the freeze
    (startup) or in the first `skip_s` after it (the warm-up) are left out."""
    start = record["frozen_at"] if record["frozen_at"] is not None else 0.0
    lines = [f"{record['callbacks']} loop callbacks, {record['callback_cpu_s']:.2f} s of CPU"]
    by_task: dict[str, list[float]] = defaultdict(list)
    for at, cpu, task in record["slices"]:
        if at >= start + skip_s:
            by_task[task].append(cpu * 1000)
    for task, ms in sorted(by_task.items(), key=lambda kv: -max(kv[1])):
        lines.append(f"slices >= 1 ms: {len(ms)} x {task}, longest {max(ms):.1f} ms CPU")
    by_gen: dict[int, list[float]] = defaultdict(list)
    for _, gen, cpu, is_frozen in record["collections"]:
        if is_frozen:
            by_gen[gen].append(cpu * 1000)
    for gen, ms in sorted(by_gen.items()):
        lines.append(
            f"collections of generation {gen} after the freeze: {len(ms)}, "
            f"longest {max(ms):.2f} ms CPU, {sum(ms):.1f} ms in all"
        )
    if not by_gen:
        lines.append("no garbage collection after the freeze")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.overhead.loop_slices")
    parser.add_argument("--rate", type=float, default=300.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--streaming", action="store_true")
    parser.add_argument("--env", action="append", default=[], help="a data plane KEY=VALUE")
    args = parser.parse_args(argv)
    pinning, workdir = choose_pinning(), Path(tempfile.mkdtemp(prefix="gearbox-slices-"))
    out, body = workdir / "slices.json", make_body("auto", args.streaming)
    env = {OUT_VARIABLE: str(out), "GEARBOX_DP_EVENT_LOOP": "asyncio"}
    env.update(item.split("=", 1) for item in args.env)
    try:
        with run_nginx(workdir / "nginx", GEARBOX_PAIRS, pinning.aux) as backend:
            ctx = RunContext(backend, pinning, workdir / "gearbox", args.streaming)
            with gearbox_process(ctx, env, module="bench.common.dp_slices"):
                url = f"http://127.0.0.1:{ctx.workdir.joinpath('gearbox.port').read_text()}"
                run_wrk(
                    url, lua_script(body, REQUEST_HEADERS, CHAT_PATH), 32, 2, pinning.aux, workdir
                )
                (workdir / "body.json").write_bytes(body)
                load = run_open_loop_process(
                    url + CHAT_PATH, workdir / "body.json", args.rate, args.seconds, pinning.aux
                )
        print(
            f"open loop at {args.rate:g} req/s: p50 {load.p50_ms:.2f} ms, "
            f"p99 {load.p99_ms:.2f} ms, p99.9 {load.p999_ms:.2f} ms, {load.errors} errors"
        )
        print("\n".join(summary(json.loads(out.read_text()), skip_s=3.0)))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
