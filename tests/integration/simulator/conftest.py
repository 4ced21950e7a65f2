"""Helpers for simulator integration tests: small fleets with millisecond latencies."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from simulator.config import SimPairConfig

FAST: dict[str, Any] = {"ttft_base_s": 0.002, "tpot_base_s": 0.001}


def pair_config(name: str = "sim-model", **overrides: Any) -> SimPairConfig:
    """A simulated pair with fast defaults; `overrides` replace any field."""
    data: dict[str, Any] = {
        "name": name,
        "family": "llama-3.1-8b-instruct",
        "quantization": "fp16",
        **FAST,
        **overrides,
    }
    return SimPairConfig.model_validate(data)


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    timeout = aiohttp.ClientTimeout(total=30, sock_connect=5, sock_read=20)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        yield session
