"""Where the data plane spends its CPU: py-spy samples taken under wrk load, summarised.

The summary counts only the main thread (the event loop), so idle exporter threads do not
dilute the shares. Written into the report so hot spots travel with the figures.

py-spy reads the process without pausing it (`--nonblocking`). Paused to sample, the loop's
samples piled onto frames that had just made a system call: on Python 3.11 every
`asyncio.get_running_loop()` (and so `current_task()`, `asyncio.timeout`) calls getpid(2),
about 10 a request, ~0.2 us each, and the paused profile gave those few calls 8.4% of the
samples (`stall_guard.loop_time` 3.5%) where the unpaused one gave them 1.3%
(docs/benchmarks.md, "Where the loop's time goes").
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from bench.common.backend import run_nginx
from bench.common.machine import Pinning
from bench.common.targets import GEARBOX_PAIRS, REQUEST_HEADERS, RunContext, gearbox_process
from bench.common.targets import request_body as make_body
from bench.overhead.section import CHAT_PATH
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


@dataclass(frozen=True, slots=True)
class Hotspots:
    samples: int
    by_module: tuple[tuple[str, float], ...]  # self-time share per library
    self_time: tuple[tuple[str, float], ...]  # top frames by self time
    inclusive: tuple[tuple[str, float], ...]  # top data_plane frames by inclusive time


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
    if total == 0:
        raise RuntimeError("py-spy recorded no samples of the data plane's main thread")

    def shares(c: Counter[str], k: int) -> tuple[tuple[str, float], ...]:
        return tuple((name, n / total) for name, n in c.most_common(k))

    return Hotspots(total, shares(modules, 20), shares(own, top), shares(incl, top))


def profile_data_plane(pinning: Pinning, workdir: Path, seconds: float) -> Hotspots:
    """Sample the data plane for `seconds` at 32 connections, non-streaming."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        raise RuntimeError("py-spy is not installed (pip install py-spy)")
    script = lua_script(make_body("auto", False), REQUEST_HEADERS, CHAT_PATH)
    raw = workdir / "py-spy.txt"
    with run_nginx(workdir / "nginx", GEARBOX_PAIRS, pinning.aux) as backend:
        ctx = RunContext(backend, pinning, workdir / "gearbox", stream=False)
        with gearbox_process(ctx) as pid:
            url = f"http://127.0.0.1:{ctx.workdir.joinpath('gearbox.port').read_text()}"
            run_wrk(url, script, 32, 2, pinning.aux, workdir)  # warm-up
            args = [spy, "record", "-p", str(pid), "-d", str(round(seconds)), "-r", "250"]
            args += ["--function", "--nonblocking", "-f", "raw", "-o", str(raw)]
            with subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) as p:
                run_wrk(url, script, 32, seconds + 1, pinning.aux, workdir)
                _, err = p.communicate(timeout=seconds + 60)
                if p.returncode != 0:
                    raise RuntimeError(f"py-spy failed: {err.decode(errors='replace')[-500:]}")
    return summarize(raw.read_text().splitlines())
