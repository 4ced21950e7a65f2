"""Closed-loop load with wrk: a Lua script sets the POST body and headers and prints the
summary as one JSON line, which `parse_wrk_output` reads back."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from bench.common.machine import Cores, pinned

_MARK = "WRK_JSON "

_DONE = """
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '%s{"requests":%d,"duration_us":%d,"bytes":%d,"connect":%d,"read":%d,"write":%d,'
    .. '"status":%d,"timeout":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d,"mean_us":%.1f,'
    .. '"max_us":%d}\\n',
    "MARK", summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write,
    e.status, e.timeout, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency.mean, latency.max))
end
"""


@dataclass(frozen=True, slots=True)
class ClosedLoopResult:
    """One closed-loop run: `connections` clients each sending the next request on reply."""

    connections: int
    requests: int
    duration_s: float
    requests_per_s: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float
    max_ms: float
    errors: int  # socket errors + non-2xx/3xx answers + timeouts
    cpu_us_per_request: float | None = None  # the proxy's CPU time per answered request


def _lua_long_string(text: str) -> str:
    level = 0
    while f"]{'=' * level}]" in text:
        level += 1
    eq = "=" * level
    return f"[{eq}[{text}]{eq}]"


def lua_script(body: bytes, headers: Mapping[str, str], path: str) -> str:
    """A wrk script that POSTs `body` with `headers` to `path` on every request."""
    lines = [
        'wrk.method = "POST"',
        f"wrk.path = {_lua_long_string(path)}",
        f"wrk.body = {_lua_long_string(body.decode())}",
        'wrk.headers["Content-Type"] = "application/json"',
    ]
    lines += [f"wrk.headers[{json.dumps(k)}] = {json.dumps(v)}" for k, v in headers.items()]
    return "\n".join(lines) + "\n" + _DONE.replace("MARK", _MARK)


def parse_wrk_output(stdout: str, connections: int) -> ClosedLoopResult:
    """Read the JSON line our Lua `done` prints; raise ValueError when it is missing."""
    for line in stdout.splitlines():
        if line.startswith(_MARK):
            d = json.loads(line[len(_MARK) :])
            break
    else:
        raise ValueError(f"wrk printed no summary line:\n{stdout[-2000:]}")
    duration_s = d["duration_us"] / 1e6
    errors = d["connect"] + d["read"] + d["write"] + d["status"] + d["timeout"]
    return ClosedLoopResult(
        connections=connections,
        requests=d["requests"],
        duration_s=duration_s,
        requests_per_s=d["requests"] / duration_s if duration_s > 0 else 0.0,
        p50_ms=d["p50_us"] / 1000,
        p90_ms=d["p90_us"] / 1000,
        p99_ms=d["p99_us"] / 1000,
        mean_ms=d["mean_us"] / 1000,
        max_ms=d["max_us"] / 1000,
        errors=errors,
    )


def run_wrk(
    base_url: str,
    script: str,
    connections: int,
    duration_s: float,
    cpus: Cores,
    workdir: Path,
) -> ClosedLoopResult:
    """wrk with one thread (pinned to `cpus`), `connections` connections, for `duration_s`."""
    binary = shutil.which("wrk")
    if binary is None:
        raise RuntimeError("wrk is not installed (Debian package wrk; `make bench`)")
    workdir.mkdir(parents=True, exist_ok=True)
    script_path = workdir / "post.lua"
    script_path.write_text(script)
    args = [
        binary,
        "-t1",
        f"-c{connections}",
        f"-d{max(1, round(duration_s))}s",
        "--timeout",
        "10s",
        "-s",
        str(script_path),
        base_url,
    ]
    out = subprocess.run(
        pinned(args, cpus), capture_output=True, text=True, check=False, timeout=duration_s + 60
    )
    if out.returncode != 0:
        raise RuntimeError(f"wrk failed ({out.returncode}): {out.stderr[-2000:]}")
    return parse_wrk_output(out.stdout, connections)
