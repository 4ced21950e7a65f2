"""Profiler integration fixtures: simulated engines on loopback and a profiler runtime."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from contracts.profile_report import Hardware
from profiler.load.workload import build_sweep
from profiler.run.profiling import PairPlan, Runtime, builtin_evalsets
from profiler.run.progress import SilentProgress
from profiler.settings import ProfilerSettings
from simulator.config import SimFleetConfig, SimPairConfig
from tests.support.redis_server import free_port

FAMILY = "gemma-3-270m"


def sim_pair(name: str, **overrides: Any) -> SimPairConfig:
    """A simulated pair with slow-enough latencies to measure (tens of milliseconds)."""
    data: dict[str, Any] = {
        "name": name,
        "family": FAMILY,
        "quantization": "bf16",
        "ttft_base_s": 0.03,
        "tpot_base_s": 0.01,
        **overrides,
    }
    return SimPairConfig.model_validate(data)


def sim_fleet(*pairs: SimPairConfig) -> SimFleetConfig:
    """A fleet whose answer keys are the profiler's own built-in eval sets."""
    return SimFleetConfig(pairs=list(pairs), answer_keys=list(builtin_evalsets()))


def make_plan(url: str, served: str, out: Path | None, **overrides: Any) -> PairPlan:
    sweep = overrides.pop("sweep", None) or build_sweep([1], [64], [8], 4, 1)
    data: dict[str, Any] = {
        "family": FAMILY,
        "quantization": "bf16",
        "served_model_name": served,
        "endpoints": (url,),
        "hardware": Hardware(name="sim", hourly_usd=1.0),
        "prices": None,
        "sweep": sweep,
        "evalsets": builtin_evalsets(),
        "out": out,
        **overrides,
    }
    return PairPlan(**data)


def closed_port() -> int:
    """A loopback port with nothing listening on it."""
    return free_port()


@pytest.fixture
async def runtime() -> AsyncIterator[Runtime]:
    async with profiler_runtime() as made:
        yield made


@asynccontextmanager
async def profiler_runtime() -> AsyncIterator[Runtime]:
    """The `runtime` fixture's, for a test that makes its own loop (virtual time)."""
    settings = ProfilerSettings(
        metrics_interval_s=0.1,
        request_timeout_s=30.0,
        preflight_timeout_s=5.0,
        engine_version=None,
        hardware=None,
        git_sha=None,
    )
    timeout = aiohttp.ClientTimeout(total=30, sock_connect=5, sock_read=20)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        yield Runtime(session, settings, SilentProgress(), git_sha="c" * 40, host="test")
