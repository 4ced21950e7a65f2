"""Start one variant, time it to /health, send one completion, measure RSS, stop it.

`engines.py smoke VARIANT` is how the start-up figures in docs/engines.md were taken; it is
also a quick check that a set-up works on a new machine. Standard library only.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from contextlib import closing, suppress
from dataclasses import asdict, dataclass
from pathlib import Path

from launch import ServeOptions, default_served_name, serve_command, serve_env
from layout import Layout

PROMPT = "One, two, three, four,"


@dataclass(frozen=True, slots=True)
class SmokeResult:
    variant: str
    startup_s: float
    rss_gib: float
    completion: str
    completion_tokens: int
    completion_s: float


def free_port() -> int:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def group_rss_bytes(pgid: int) -> int:
    """RSS of every process in the process group (vLLM runs an API server, a core, a worker)."""
    total = 0
    for status in Path("/proc").glob("[0-9]*/stat"):
        with suppress(OSError, IndexError, ValueError):
            fields = status.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid:  # field 5 of /proc/PID/stat: process group
                total += int(fields[21]) * os.sysconf("SC_PAGE_SIZE")  # field 24: rss pages
    return total


def _wait_health(url: str, process: subprocess.Popen[bytes], timeout_s: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if process.poll() is not None:
            raise RuntimeError(f"the engine exited with {process.returncode} during start-up")
        with (
            suppress(urllib.error.URLError, OSError),
            urllib.request.urlopen(f"{url}/health", timeout=5) as response,
        ):
            if response.status == 200:
                return time.monotonic() - start
        time.sleep(1.0)
    raise RuntimeError(f"no /health 200 within {timeout_s:.0f} s")


def _complete(url: str, model: str) -> tuple[str, int, float]:
    body = {"model": model, "prompt": PROMPT, "max_tokens": 16, "temperature": 0}
    request = urllib.request.Request(
        f"{url}/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    start = time.monotonic()
    with urllib.request.urlopen(request, timeout=120) as response:
        answer = json.loads(response.read())
    return (
        answer["choices"][0]["text"],
        int(answer["usage"]["completion_tokens"]),
        time.monotonic() - start,
    )


def smoke(layout: Layout, variant: str, opts: ServeOptions, log: Path) -> SmokeResult:
    """Run the whole check; the engine is stopped whatever happens."""
    argv = serve_command(layout, variant, opts)
    env = {**os.environ, **serve_env(opts)}
    url = f"http://{opts.host}:{opts.port}"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as sink:
        process = subprocess.Popen(
            argv, stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    try:
        startup_s = _wait_health(url, process, timeout_s=600)
        text, tokens, seconds = _complete(
            url, opts.served_model_name or default_served_name(variant)
        )
        rss = group_rss_bytes(process.pid)
    finally:
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return SmokeResult(variant, round(startup_s, 1), round(rss / 2**30, 2), text, tokens,
                       round(seconds, 2))  # fmt: skip


def result_line(result: SmokeResult) -> str:
    return json.dumps(asdict(result))
