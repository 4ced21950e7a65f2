"""The engines a demo routes to: real vLLM CPU engines, or the engine simulator's fleet.

Real engines are set up and started through infra/engines (the same scripts `make engines`
runs); the simulator through `python -m simulator serve`. Both give a list of `FleetPair`s.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import yaml

from demo.processes import StartupError, rss_bytes, start_child, wait_http_ok
from demo.redis_launcher import free_port

ROOT = Path(__file__).resolve().parent.parent
ENGINES_CLI = ROOT / "infra" / "engines" / "engines.py"
START_ENGINE = ROOT / "infra" / "engines" / "start_engine.sh"
SIM_FLEET = ROOT / "examples" / "sim-fleet.yaml"
ENGINE_STARTUP_TIMEOUT_S = 600.0
REAL_FAMILY = "gemma-3-270m"
# The price of what an engine runs on is an input (like a GPU's hourly price); token prices
# are derived by the control plane from the throughput the profiler measures in this run.
CPU_HOURLY_USD = 0.10  # a 2-vCPU, 24 GiB cloud VM
CPU_HARDWARE = "2-vCPU x86-64 VM (AVX-512), vLLM CPU"
SIM_HOURLY_USD = {"llama-3.1-8b-instruct": 2.99, "llama-3.1-70b-instruct": 5.98}
SIM_HARDWARE = {"llama-3.1-8b-instruct": "1x H100 (simulated)"}


@dataclass(frozen=True, slots=True)
class FleetPair:
    """One engine serving one pair; `started_s` and `rss_bytes` are measured (0 = not measured)."""

    family: str
    quantization: str
    served_name: str
    url: str
    hourly_usd: float
    hardware: str
    started_s: float = 0.0
    rss_bytes: int = 0

    @property
    def pair(self) -> str:
        return f"{self.family}@{self.quantization}"


# engine variant (infra/engines) -> Gearbox quantization name
REAL_VARIANTS = {"bf16": "bf16", "w8a8": "int8-w8a8", "w4a16": "int4-w4a16"}


def engines_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ENGINES_CLI), *args], capture_output=True, text=True, check=False
    )


def check_engine_memory(engines: int, kv_gib: int) -> str | None:
    """None when `engines` engines fit in memory now, else the message to show."""
    done = engines_cli("check-memory", "--engines", str(engines), "--kv-gib", str(kv_gib))
    return None if done.returncode == 0 else (done.stdout + done.stderr).strip()


def run_engine_setup(variants: tuple[str, ...]) -> None:
    """The idempotent set-up, its progress streamed to this terminal; raises on failure."""
    argv = [sys.executable, str(ENGINES_CLI), "setup", "--variants", ",".join(variants)]
    if subprocess.run(argv, check=False).returncode != 0:
        raise StartupError("the engine set-up failed (see its output above)")


async def start_real_engines(
    children: ExitStack,
    variants: tuple[str, ...],
    logs: Path,
    kv_gib: int = 1,
    extra_flags: tuple[str, ...] = (),
) -> list[FleetPair]:
    """Start one vLLM engine per variant at once; wait until each answers /health.

    `extra_flags` go to `engines.py start` (e.g. `--all-cpus` when one engine runs alone)."""
    started = []
    for variant in variants:
        port, name = free_port(), f"{REAL_FAMILY}-{variant}"
        argv = ["bash", str(START_ENGINE), variant, str(port), "--kv-gib", str(kv_gib)]
        argv += ["--served-model-name", name, "--skip-memory-check", *extra_flags]
        child = start_child(f"vLLM {variant}", argv, logs / f"engine-{variant}.log")
        children.callback(child.stop)
        started.append((variant, name, f"http://127.0.0.1:{port}", child))
    waits = [wait_http_ok(f"{url}/health", c, ENGINE_STARTUP_TIMEOUT_S) for _, _, url, c in started]
    seconds = await asyncio.gather(*waits)
    return [
        FleetPair(
            REAL_FAMILY,
            REAL_VARIANTS[variant],
            name,
            url,
            CPU_HOURLY_USD,
            CPU_HARDWARE,
            started_s=wait_s,
            rss_bytes=rss_bytes(child.process.pid),
        )
        for (variant, name, url, child), wait_s in zip(started, seconds, strict=True)
    ]


async def start_simulated_fleet(children: ExitStack, logs: Path) -> list[FleetPair]:
    """`python -m simulator serve` on the example fleet; waits for its ports file."""
    ports_file = logs / "sim-ports.json"
    ports_file.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "simulator", "serve", "--fleet", str(SIM_FLEET)]
    child = start_child("simulator", [*argv, "--ports-file", str(ports_file)], logs / "sim.log")
    children.callback(child.stop)
    start = time.monotonic()
    while not ports_file.is_file():
        if not child.running():
            raise StartupError(child.failure())
        if time.monotonic() - start > 60:
            raise StartupError(f"the simulator wrote no ports file within 60 s; log {child.log}")
        await asyncio.sleep(0.2)
    urls: dict[str, str] = json.loads(ports_file.read_text())
    fleet = yaml.safe_load(SIM_FLEET.read_text())
    return [
        FleetPair(
            p["family"],
            p["quantization"],
            p["name"],
            urls[p["name"]],
            SIM_HOURLY_USD.get(p["family"], 2.99),
            SIM_HARDWARE.get(p["family"], "2x H100 (simulated)"),
        )
        for p in fleet["pairs"]
    ]
