"""The latency model seen from a client: prompt length, concurrency and the FIFO queue.

Simulated sleeps never end early, so the checks are lower bounds (robust on a noisy box) plus
comparisons made with wide margins.
"""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from simulator.config import SimFleetConfig
from simulator.fleet import run_fleet
from tests.integration.simulator.conftest import pair_config
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration
NAME = "sim-model"


async def first_token_s(http: aiohttp.ClientSession, url: str, prompt: str) -> float:
    body = {"model": NAME, "prompt": prompt, "max_tokens": 1, "stream": True}
    started = time.perf_counter()
    async with http.post(url + "/v1/completions", json=body) as resp:
        await resp.content.readuntil(b"\n\n")
        elapsed = time.perf_counter() - started
        await resp.read()
    return elapsed


async def timed_completion(http: aiohttp.ClientSession, url: str, tokens: int) -> float:
    body = {"model": NAME, "prompt": "x", "max_tokens": tokens}
    started = time.perf_counter()
    async with http.post(url + "/v1/completions", json=body) as resp:
        assert resp.status == 200
        await resp.read()
    return time.perf_counter() - started


async def test_ttft_grows_with_prompt_length(http: aiohttp.ClientSession) -> None:
    config = pair_config(NAME, ttft_base_s=0.001, ttft_per_input_token_s=0.0005)
    async with run_fleet(SimFleetConfig(pairs=[config])) as fleet:
        short = await first_token_s(http, fleet.url(NAME), "x" * 4)
        long = await first_token_s(http, fleet.url(NAME), "x" * 4 * 600)
    assert long >= 0.3  # 600 tokens x 0.5 ms
    assert long > short + 0.15


async def test_tpot_grows_with_concurrency(http: aiohttp.ClientSession) -> None:
    config = pair_config(NAME, tpot_base_s=0.002, tpot_per_running_s=0.004, max_running=8)
    async with run_fleet(SimFleetConfig(pairs=[config])) as fleet:
        alone = await timed_completion(http, fleet.url(NAME), 20)
        together = await asyncio.gather(
            *(timed_completion(http, fleet.url(NAME), 20) for _ in range(8))
        )
    assert alone >= 19 * 0.002
    # With 8 decoding at once each step takes 2 + 4 * 7 = 30 ms: >= 19 steps x most of that.
    assert min(together) >= 19 * 0.02
    assert min(together) > alone + 0.2


async def test_requests_beyond_max_running_queue_fifo_then_503(
    http: aiohttp.ClientSession,
) -> None:
    config = pair_config(NAME, tpot_base_s=0.01, max_running=2, max_queue=2)
    async with run_fleet(SimFleetConfig(pairs=[config])) as fleet:
        url = fleet.url(NAME)
        tasks = [asyncio.create_task(timed_completion(http, url, 20)) for _ in range(4)]
        await eventually(
            lambda: (fleet.stats(NAME).running, fleet.stats(NAME).waiting) == (2, 2),
            what="two running, two waiting",
        )
        body = {"model": NAME, "prompt": "x"}
        async with http.post(url + "/v1/completions", json=body) as resp:
            assert resp.status == 503
            error = (await resp.json())["error"]
        durations = await asyncio.gather(*tasks)
        stats = fleet.stats(NAME)
    assert error["code"] == 503
    assert stats.rejected_queue_full == 1
    assert (stats.completed, stats.running, stats.waiting) == (4, 0, 0)
    # The two queued requests waited for a full request (19 x 10 ms) before starting.
    assert sorted(durations)[2] >= 2 * 19 * 0.01
