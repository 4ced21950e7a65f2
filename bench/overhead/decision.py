"""Section 2: decision speed, measured by pytest-benchmark and read back from its JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common.machine import Cores, pinned

TEST_FILE = Path(__file__).with_name("test_decision_speed.py")


@dataclass(frozen=True, slots=True)
class SpeedResult:
    section: str  # "choose_route" or "classify"
    size: str  # "5 pairs", "4 KB", ...
    median_us: float
    mean_us: float
    min_us: float
    stddev_us: float
    rounds: int


def parse_benchmark_json(data: dict[str, Any]) -> list[SpeedResult]:
    """One result per benchmark, sizes taken from `extra_info` the tests set."""
    results = []
    for bench in data["benchmarks"]:
        extra, stats = bench.get("extra_info", {}), bench["stats"]
        if "n_pairs" in extra:
            size = f"{extra['n_pairs']} pairs"
        else:
            size = str(extra.get("prompt", bench["name"]))
        results.append(
            SpeedResult(
                section=str(extra.get("section", bench["name"])),
                size=size,
                median_us=stats["median"] * 1e6,
                mean_us=stats["mean"] * 1e6,
                min_us=stats["min"] * 1e6,
                stddev_us=stats["stddev"] * 1e6,
                rounds=int(stats["rounds"]),
            )
        )
    return results


def run_decision_speed(workdir: Path, cpus: Cores, quick: bool) -> list[SpeedResult]:
    """Run the benchmark file pinned to `cpus`; raises when pytest fails."""
    workdir.mkdir(parents=True, exist_ok=True)
    out = workdir / "decision-speed.json"
    args = [
        sys.executable,
        "-m",
        "pytest",
        str(TEST_FILE),
        "-q",
        "-p",
        "no:cacheprovider",
        f"--benchmark-json={out}",
        "--benchmark-disable-gc",
        "--benchmark-warmup=on",
        f"--benchmark-max-time={0.2 if quick else 1.0}",
        f"--benchmark-min-rounds={5 if quick else 50}",
    ]
    done = subprocess.run(pinned(args, cpus), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"decision-speed benchmarks failed:\n{done.stdout[-3000:]}")
    return parse_benchmark_json(json.loads(out.read_text()))
