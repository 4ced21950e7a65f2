"""Where the data plane spends its CPU: py-spy samples taken under wrk load, summarised.

The summary counts only the main thread (the event loop), so idle exporter threads do not
dilute the shares. Written into the report so hot spots travel with the figures.

py-spy reads the process without pausing it (`--nonblocking`). Paused to sample, the loop's
samples piled onto frames that had just made a system call: on Python 3.11 every
`asyncio.get_running_loop()` (and so `current_task()`, `asyncio.timeout`) calls getpid(2),
about 10 a request, ~0.2 us each, and the paused profile gave those few calls 8.4% of the
samples (`stall_guard.loop_time` 3.5%) where the unpaused one gave them 1.3%
(docs/benchmarks.md, "Where the loop's time goes").

`python -m bench.overhead.hotspots [--connections 64] [--stream] [--seconds 15]` samples one
mode at one connection count and prints the request's parts (`PARTS`, inclusive) and the top
frames by self time in microseconds of CPU per request: each share of the main thread's
samples times the data plane's CPU time per answered request over the same load
(docs/benchmarks.md, "CPU per request, item by item").
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from bench.common.backend import run_nginx
from bench.common.machine import Pinning, choose_pinning
from bench.common.targets import GEARBOX_PAIRS, REQUEST_HEADERS, RunContext, gearbox_process
from bench.common.targets import request_body as make_body
from bench.overhead.section import CHAT_PATH, with_cpu
from bench.overhead.wrk import lua_script, run_wrk

MAIN_MARK = "data_plane/__main__.py"
_GROUPS = (
    ("data_plane/", "data_plane (Gearbox code)"),
    ("aiohttp/", "aiohttp"),
    ("asyncio/", "asyncio"),
    ("opentelemetry/", "opentelemetry"),
    # py-spy shortens site-packages paths: these are OpenTelemetry's SDK modules
    ("_shared_internal/", "opentelemetry"),
    ("trace/__init__.py", "opentelemetry"),
    ("trace/export/", "opentelemetry"),
    ("sdk/", "opentelemetry"),
    ("prometheus_client/", "prometheus_client"),
    ("pydantic", "pydantic"),
    ("numpy/", "numpy"),
    ("json/", "json (stdlib)"),
    ("yarl/", "yarl / multidict"),
    ("multidict/", "yarl / multidict"),
)


# A request's parts: (label, the frame whose inclusive samples it is), in the request's order;
# indented labels are inside the one above.
PARTS = (
    ("Gearbox's handler (middleware.gateway)", "make_gateway.<locals>.gateway"),
    ("  decision step (DecisionStep.decide)", "DecisionStep.decide"),
    ("    reading the request (read_request)", "read_request"),
    ("    choose_route", "choose_route"),
    ("    admission's fast path (DecisionStep._fleet)", "DecisionStep._fleet"),
    ("    decision counters (DecisionStep._count)", "DecisionStep._count"),
    ("  walk (Proxy.serve)", "Proxy.serve"),
    ("    attempt (AttemptRunner.run)", "AttemptRunner.run"),
    ("      upstream send (Http1Upstream.send)", "Http1Upstream.send"),
    ("      stream relay (AttemptRunner._relay)", "AttemptRunner._relay"),
    ("    next candidate, handover limit (Proxy._handover_limit)", "Proxy._handover_limit"),
    ("    quality guard (Proxy._guard)", "Proxy._guard"),
    ("    delivery (Delivery.deliver)", "Delivery.deliver"),
    ("      accounting (Delivery._account)", "Delivery._account"),
    ("  answer to the client (AiohttpSink methods)", "AiohttpSink."),
    ("  request's end (Finish.finish)", "Finish.finish"),
    ("  spans ended and encoded (Span.__exit__)", "Span.__exit__"),
)


@dataclass(frozen=True, slots=True)
class Hotspots:
    samples: int
    by_module: tuple[tuple[str, float], ...]  # self-time share per library
    self_time: tuple[tuple[str, float], ...]  # top frames by self time
    inclusive: tuple[tuple[str, float], ...]  # top data_plane frames by inclusive time
    parts: tuple[tuple[str, float], ...] = ()  # PARTS' inclusive shares
    cpu_us_per_request: float | None = None  # the data plane's, over the sampled load
    requests_per_s: float | None = None


def _function(frame: str) -> str:
    """'Class.method (path:line)' -> 'Class.method'."""
    return frame.partition(" (")[0]


def _in_part(frames: Iterable[str], needle: str) -> bool:
    """Whether a stack holds the part's frame (a name ending in '.': any method of it)."""
    if needle.endswith("."):
        return any(_function(f).startswith(needle) for f in frames)
    return any(_function(f) == needle for f in frames)


def _group(frame: str) -> str:
    path = frame.rpartition("(")[2]
    for needle, name in _GROUPS:
        if needle in path:
            return name
    return "other (stdlib, C code)"


def summarize(lines: Iterable[str], top: int = 15) -> Hotspots:
    """Collapsed py-spy stacks ('f1;f2;f3 N') of the main thread, as shares."""
    own: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    modules: Counter[str] = Counter()
    parts: Counter[str] = Counter()
    total = 0
    for line in lines:
        stack, _, count = line.rstrip().rpartition(" ")
        frames = stack.split(";")
        if not count.isdigit() or not any(MAIN_MARK in f for f in frames):
            continue
        n = int(count)
        total += n
        own[frames[-1]] += n
        modules[_group(frames[-1])] += n
        for frame in set(frames):
            if "data_plane/" in frame and MAIN_MARK not in frame:
                incl[frame] += n
        for label, needle in PARTS:
            if _in_part(frames, needle):
                parts[label] += n
    if total == 0:
        raise RuntimeError("py-spy recorded no samples of the data plane's main thread")

    def shares(c: Counter[str], k: int) -> tuple[tuple[str, float], ...]:
        return tuple((name, n / total) for name, n in c.most_common(k))

    in_order = tuple((label, parts[label] / total) for label, _ in PARTS)
    return Hotspots(total, shares(modules, 20), shares(own, top), shares(incl, top), in_order)


def profile_data_plane(
    pinning: Pinning,
    workdir: Path,
    seconds: float,
    connections: int = 32,
    stream: bool = False,
) -> Hotspots:
    """Sample the data plane for `seconds` at `connections`, non-streaming unless `stream`,
    with its CPU time per answered request over the same load."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        raise RuntimeError("py-spy is not installed (pip install py-spy)")
    script = lua_script(make_body("auto", stream), REQUEST_HEADERS, CHAT_PATH)
    raw = workdir / "py-spy.txt"
    with run_nginx(workdir / "nginx", GEARBOX_PAIRS, pinning.aux) as backend:
        ctx = RunContext(backend, pinning, workdir / "gearbox", stream=stream)
        with gearbox_process(ctx) as pid:
            url = f"http://127.0.0.1:{ctx.workdir.joinpath('gearbox.port').read_text()}"
            run_wrk(url, script, connections, 2, pinning.aux, workdir)  # warm-up
            args = [spy, "record", "-p", str(pid), "-d", str(round(seconds)), "-r", "250"]
            args += ["--function", "--nonblocking", "-f", "raw", "-o", str(raw)]
            with subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) as p:
                load = with_cpu(
                    pid,
                    lambda: run_wrk(url, script, connections, seconds + 1, pinning.aux, workdir),
                )
                _, err = p.communicate(timeout=seconds + 60)
                if p.returncode != 0:
                    raise RuntimeError(f"py-spy failed: {err.decode(errors='replace')[-500:]}")
    found = summarize(raw.read_text().splitlines())
    return replace(
        found, cpu_us_per_request=load.cpu_us_per_request, requests_per_s=load.requests_per_s
    )


def per_request_lines(h: Hotspots, top: int = 15) -> list[str]:
    """PURE: the request's parts and the top frames by self time, in microseconds of CPU per
    request (a share of the samples times `h.cpu_us_per_request`)."""
    us = h.cpu_us_per_request or 0.0
    rps = h.requests_per_s or 0.0
    lines = [
        f"{h.samples} main-thread samples; {us:,.0f} us of CPU per request at {rps:,.0f} req/s"
    ]
    lines += ["", "| part of the request (inclusive) | us per request | share |", "|---|---|---|"]
    lines += [f"| {label} | {share * us:.1f} | {share * 100:.1f}% |" for label, share in h.parts]
    lines += ["", "| frame (self time) | us per request | share |", "|---|---|---|"]
    lines += [
        f"| `{n}` | {share * us:.1f} | {share * 100:.1f}% |" for n, share in h.self_time[:top]
    ]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.overhead.hotspots", description=__doc__)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--seconds", type=float, default=15.0)
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="gearbox-hotspots-"))
    try:
        found = profile_data_plane(
            choose_pinning(), workdir, args.seconds, args.connections, args.stream
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print("\n".join(per_request_lines(found)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
