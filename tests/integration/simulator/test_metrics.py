"""`/metrics` carries vLLM's names and labels, and the numbers move with traffic."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from simulator.config import SimFleetConfig
from simulator.fleet import run_fleet
from tests.integration.simulator.conftest import pair_config
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration
NAME = "org/sim-model"
LABELS = {"engine": "0", "model_name": NAME}


async def scrape(http: aiohttp.ClientSession, url: str) -> dict[str, float]:
    async with http.get(url + "/metrics") as resp:
        assert resp.status == 200
        text = await resp.text()
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = dict(sample.labels)
            if sample.name == "vllm:cache_config_info":
                samples[sample.name] = float(labels["num_gpu_blocks"])
            elif labels.get("model_name") == NAME and "le" not in labels:
                reason = labels.pop("finished_reason", None)
                assert labels == LABELS
                samples[sample.name + (f"/{reason}" if reason else "")] = sample.value
    return samples


async def test_vllm_metric_names_present_and_moving(http: aiohttp.ClientSession) -> None:
    config = SimFleetConfig(pairs=[pair_config(NAME, max_running=1, tpot_base_s=0.01)])
    async with run_fleet(config) as fleet:
        url = fleet.url(NAME)
        before = await scrape(http, url)
        for name in (
            "vllm:num_requests_running",
            "vllm:num_requests_waiting",
            "vllm:kv_cache_usage_perc",
            "vllm:num_preemptions_total",
            "vllm:prompt_tokens_total",
            "vllm:generation_tokens_total",
            "vllm:time_to_first_token_seconds_count",
            "vllm:inter_token_latency_seconds_count",
            "vllm:e2e_request_latency_seconds_count",
            "vllm:request_queue_time_seconds_count",
            "vllm:cache_config_info",
        ):
            assert name in before, name
        assert before["vllm:generation_tokens_total"] == 0
        assert before["vllm:cache_config_info"] == 4096 // 16  # one full context, 16-token blocks

        body = {"model": NAME, "prompt": "abcdefgh", "max_tokens": 20}
        posts = [
            asyncio.create_task(http.post(url + "/v1/completions", json=body)) for _ in range(3)
        ]

        async def busy() -> bool:
            now = await scrape(http, url)
            return now["vllm:num_requests_running"] == 1 and now["vllm:num_requests_waiting"] == 2

        await eventually(busy, timeout_s=5, what="one running, two waiting")
        assert (await scrape(http, url))["vllm:kv_cache_usage_perc"] > 0
        for response in await asyncio.gather(*posts):
            assert response.status == 200
            response.release()
        after = await scrape(http, url)
    assert after["vllm:prompt_tokens_total"] == 3 * 2
    assert after["vllm:generation_tokens_total"] == 3 * 20
    assert after["vllm:time_to_first_token_seconds_count"] == 3
    assert after["vllm:inter_token_latency_seconds_count"] == 3 * 19
    assert after["vllm:e2e_request_latency_seconds_count"] == 3
    assert after["vllm:request_queue_time_seconds_count"] == 3
    assert after["vllm:request_queue_time_seconds_sum"] >= 0.19 * 3  # the two later ones waited
    assert (after["vllm:num_requests_running"], after["vllm:num_requests_waiting"]) == (0, 0)
    assert after["vllm:kv_cache_usage_perc"] == 0
    assert after["vllm:request_success_total/length"] == 3
