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
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from demo.engine_check import Dropped, StartedEngine, Working, check_engines
from demo.processes import StartupError, rss_bytes, start_child
from demo.redis_launcher import free_port
from demo.variants import REAL_VARIANTS

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
    """One engine serving one pair; `started_s`, `rss_bytes` and `smoke_tokens_per_s` are
    measured (0 = not measured)."""

    family: str
    quantization: str
    served_name: str
    url: str
    hourly_usd: float
    hardware: str
    started_s: float = 0.0
    rss_bytes: int = 0
    smoke_tokens_per_s: float = 0.0  # the smoke completion's decode speed (real engines)

    @property
    def pair(self) -> str:
        return f"{self.family}@{self.quantization}"


def engines_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ENGINES_CLI), *args], capture_output=True, text=True, check=False
    )


def check_engine_memory(engines: int, kv_gib: int) -> str | None:
    """None when `engines` engines fit in memory now, else the message to show."""
    done = engines_cli("check-memory", "--engines", str(engines), "--kv-gib", str(kv_gib))
    return None if done.returncode == 0 else (done.stdout + done.stderr).strip()


async def _run_cli(*args: str, capture: bool) -> tuple[int, str]:
    """`engines.py ARGS` without blocking the loop; a cancelled demo stops it too."""
    pipe = asyncio.subprocess.PIPE if capture else None
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(ENGINES_CLI), *args, stdout=pipe, stdin=asyncio.subprocess.DEVNULL
    )
    try:
        out, _ = await process.communicate()
    except asyncio.CancelledError:
        process.terminate()
        await asyncio.shield(process.wait())
        raise
    return process.returncode or 0, (out or b"").decode(errors="replace")


async def run_engine_setup(variants: Sequence[str]) -> None:
    """The idempotent set-up, its progress streamed to this terminal; raises on failure."""
    code, _ = await _run_cli("setup", "--variants", ",".join(variants), capture=False)
    if code != 0:
        raise StartupError("the engine set-up failed (see its output above)")


async def engine_capabilities(variants: Sequence[str]) -> dict[str, Any]:
    """`engines.py capabilities --json`: the CPU's ISA, vLLM's kernels, per variant why not."""
    code, out = await _run_cli(
        "capabilities", "--json", "--variants", ",".join(variants), capture=True
    )
    if code != 0:
        raise StartupError(f"engines.py capabilities failed (exit {code}): {out.strip()}")
    described: dict[str, Any] = json.loads(out)
    return described


def launch_engines(
    children: ExitStack,
    variants: Sequence[str],
    logs: Path,
    kv_gib: int = 1,
    extra_flags: tuple[str, ...] = (),
) -> list[StartedEngine]:
    """Start one vLLM engine per variant at once (`engines.py start`), not waiting for them.

    `extra_flags` go to `engines.py start` (e.g. `--all-cpus` when one engine runs alone)."""
    started = []
    for variant in variants:
        port, name = free_port(), f"{REAL_FAMILY}-{variant}"
        argv = ["bash", str(START_ENGINE), variant, str(port), "--kv-gib", str(kv_gib)]
        argv += ["--served-model-name", name, "--skip-memory-check", *extra_flags]
        child = start_child(f"vLLM {variant}", argv, logs / f"engine-{variant}.log")
        children.callback(child.stop)
        started.append(StartedEngine(variant, name, f"http://127.0.0.1:{port}", child))
    return started


def fleet_pair(working: Working, hardware: str = CPU_HARDWARE) -> FleetPair:
    engine = working.engine
    return FleetPair(
        REAL_FAMILY,
        REAL_VARIANTS[engine.variant],
        engine.served_name,
        engine.url,
        CPU_HOURLY_USD,
        hardware,
        started_s=working.up_s,
        rss_bytes=rss_bytes(engine.child.process.pid),
        smoke_tokens_per_s=working.smoke.tokens_per_s,
    )


async def start_real_engines(
    children: ExitStack,
    variants: Sequence[str],
    logs: Path,
    kv_gib: int = 1,
    extra_flags: tuple[str, ...] = (),
    hardware: str = CPU_HARDWARE,
) -> tuple[list[FleetPair], list[Dropped]]:
    """Start the variants' engines at once; each must answer /health and one real completion
    (demo.engine_check). Returns the working pairs, and the variants dropped with the reason."""
    started = launch_engines(children, variants, logs, kv_gib, extra_flags)
    working, dropped = await check_engines(started, ENGINE_STARTUP_TIMEOUT_S)
    return [fleet_pair(w, hardware) for w in working], dropped


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
