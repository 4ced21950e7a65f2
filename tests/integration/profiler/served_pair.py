"""One simulated pair served by `python -m simulator serve`, and the profiler's own report of it
(`python -m profiler run`), for the tests that import another tool's measurements into it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from profiler.run.profiling import builtin_evalsets

REPO = Path(__file__).resolve().parents[3]
MODEL = "sim-a"
FAMILY = "gemma-3-270m"


@contextmanager
def simulated_pair(workdir: Path, accuracy: dict[str, float]) -> Iterator[str]:
    """The pair's base URL while it runs; its answer keys are the profiler's eval sets."""
    fleet = workdir / "fleet.json"
    pair = {"name": MODEL, "family": FAMILY, "quantization": "bf16", "ttft_base_s": 0.005,
            "tpot_base_s": 0.001, "accuracy": accuracy}  # fmt: skip
    keys = [str(p) for p in builtin_evalsets()]
    fleet.write_text(json.dumps({"pairs": [pair], "answer_keys": keys}), encoding="utf-8")
    ports = workdir / "ports.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "simulator", "serve", "--fleet", str(fleet),
         "--ports-file", str(ports)],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not ports.exists():
            assert proc.poll() is None, "the simulator exited"
            assert time.monotonic() < deadline, "the simulator did not start in 30 s"
            time.sleep(0.05)
        yield str(json.loads(ports.read_text())[MODEL])
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def profiler(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "profiler", *args], cwd=REPO, capture_output=True, text=True,
        timeout=timeout, check=False,
    )  # fmt: skip


def profile(url: str, out: Path) -> Path:
    """The profiler's own report: one small load level and its built-in eval sets."""
    done = profiler(
        "run", "--endpoint", url, "--model", MODEL, "--family", FAMILY, "--quantization",
        "bf16", "--hourly-usd", "1", "--concurrency", "1", "--input-tokens", "32",
        "--output-tokens", "4", "--requests-per-level", "4", "--warmup", "0", "--quiet",
        "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return out
