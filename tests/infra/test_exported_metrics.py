"""Every metric the alert rules and the dashboard use is exported, with series, by the process
that owns it: a real control plane and a real data plane (on redis-server and simulator engines)
after ok, streaming, failover, no-route, quality-guard, broken-stream and shadow traffic."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis
from prometheus_client.parser import text_string_to_metric_families

from contracts.redis_keys import RedisKeys
from data_plane.app import STORE
from data_plane.resilience.output_length import MIN_SAMPLES as OUTPUT_SAMPLES
from simulator import FaultConfig, Fleet, SimFleetConfig, SimPairConfig, run_fleet
from simulator.answer_key import KnownAnswer
from tests.infra.metric_names import documented_metrics, metric_names_in_infra
from tests.support.redis_server import RedisProcess
from tests.support.waiting import eventually
from tests.ui.stack import ADMIN, ServerFactory, Stack, client, example_reports, start_stack

pytestmark = pytest.mark.integration
FAILING_PAIR = "llama-3.1-70b-instruct@fp8"  # first choice of its family; answers 503
FALLBACK_PAIR = "llama-3.1-70b-instruct@awq-int4"
BREAKING_PAIR = "llama-3.1-8b-instruct@awq-int4"  # streams break after two chunks
SHADOW_PAIR = PRECISE_PAIR = "llama-3.1-8b-instruct@fp16"  # the family's most precise
CHECKED = "llama-3.1-8b-instruct@fp8"  # re-asked on PRECISE_PAIR
CHECKED_PROMPT = "What is 6 * 7?"  # math: a category whose scorer decides (docs/accuracy.md)
BOTH = "gearbox_build_info"
HOLDOUT_MATH = Path(__file__).parents[2] / "profiler" / "evalsets" / "holdout" / "math.jsonl"
# Legitimately zero after this traffic: no retry was refused, every table load worked,
# nothing is queued or in flight when /metrics is scraped, and no pair saturated, so no
# request spilled or waited in the flow-control queue and the demand figures are 0
# (tests/component/data_plane/test_demand.py moves them).
ZERO_HERE = {
    "gearbox_retry_budget_exhausted_total",
    "gearbox_instance_id_clashes_total",  # tests/hostile/test_replica_identity.py
    "gearbox_routing_table_load_failures_total",
    "gearbox_engine_queue_depth",
    "gearbox_engine_scrape_errors_total",  # small pages: tests/hostile/test_engine_pages.py
    "gearbox_in_flight_requests",
    "gearbox_spans_dropped_total",  # tracing is off here; tests/component/.../test_otlp_export.py
    "gearbox_pair_spilled_total",
    "gearbox_tenant_shed_total",  # nothing is shed here: tests/hostile/test_tenant_burst.py
    "gearbox_pair_demand_concurrency",
    "gearbox_pair_desired_replicas",
    "gearbox_pair_utilisation_ratio",
    "gearbox_cp_last_refit_timestamp_seconds",  # the traffic here drifts from nothing
    # nothing waits here: tests/component/data_plane/test_flow.py moves them
    "gearbox_flow_queue_length",
    "gearbox_flow_queue_wait_seconds",
    "gearbox_flow_queued_total",
    "gearbox_flow_dispatched_total",
    "gearbox_flow_refused_total",
    "gearbox_flow_sent_past_budget_total",
}


def _simulated(reports: Mapping[str, Mapping[str, Any]], fleet: Fleet) -> dict[str, Any]:
    """The example reports, each pair served by its own simulator engine."""
    return {
        pair: {**report, "endpoints": [fleet.url(pair)], "served_model_name": pair}
        for pair, report in reports.items()
    }


def _sim_pair(pair: str, report: Mapping[str, Any]) -> SimPairConfig:
    return SimPairConfig(
        name=pair,
        family=report["family"],
        quantization=report["quantization"],
        ttft_base_s=0.002,
        tpot_base_s=0.0005,
        context_length=report["context_length"],
        accuracy={"math": 1.0},  # the accuracy check's reference answers CHECKED_PROMPT
    )


@dataclass
class Scraped:
    control_plane: str
    data_plane: str


def series_names(exposition: str) -> set[str]:
    """Names that have at least one sample, spelled as METRICS.md spells them."""
    return {
        f"{family.name}_total" if family.type == "counter" else family.name
        for family in text_string_to_metric_families(exposition)
        if family.samples
    }


def moved_names(exposition: str) -> set[str]:
    """Names with a non-zero sample: a counter or histogram that counted something, a gauge
    that is set to something (`_created` timestamps and histogram buckets do not count)."""
    moved = set()
    for family in text_string_to_metric_families(exposition):
        values = [
            sample.value
            for sample in family.samples
            if not sample.name.endswith("_created")
            and (family.type != "histogram" or sample.name.endswith("_count"))
        ]
        if any(v != 0 for v in values):
            moved.add(f"{family.name}_total" if family.type == "counter" else family.name)
    return moved


def owner(name: str) -> str:
    """The process METRICS.md lists the metric under."""
    if name == BOTH:
        return "both"
    return "control_plane" if name.startswith("gearbox_cp_") else "data_plane"


def missing_series(names: set[str], scraped: Scraped) -> list[str]:
    """'name (process)' for every name its owner does not export with a series."""
    have = {
        "control_plane": series_names(scraped.control_plane),
        "data_plane": series_names(scraped.data_plane),
    }
    missing = []
    for name in sorted(names):
        where = ["control_plane", "data_plane"] if owner(name) == "both" else [owner(name)]
        missing += [f"{name} ({process})" for process in where if name not in have[process]]
    return missing


async def _call(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any], **headers: str
) -> tuple[int, dict[str, str], str]:
    async with session.post(url, json=body, headers=headers) as resp:
        return resp.status, dict(resp.headers), await resp.text()


def _chat(model: str, **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "Say hi."}],
            "max_tokens": 8, **extra}  # fmt: skip


async def _traffic(stack: Stack, fleet: Fleet) -> None:
    """One request of every kind the dashboard and alerts look at, each checked to be that."""
    chat = f"{stack.dp_url}/v1/chat/completions"
    async with client() as s:
        status, headers, _ = await _call(s, chat, _chat("auto"))
        assert status == 200, "plain request"
        status, _, text = await _call(s, chat, _chat("auto", stream=True))
        assert (status, text.rstrip().endswith("data: [DONE]")) == (200, True), "streaming"
        # extraction: the example fp8 pair meets its floor with confidence (on code or
        # reasoning no 8b pair does, and the most precise one would be asked at once)
        status, headers, _ = await _call(
            s,
            chat,
            _chat("llama-3.1-8b-instruct", response_format={"type": "json_object"}),
            **{"X-Task-Category": "extraction"},
        )
        assert status == 200, "quality guard: filler text is not JSON, asked again"
        assert headers["X-Route-Pair"] == PRECISE_PAIR
        fleet.set_faults(FAILING_PAIR, FaultConfig(error_rate=1.0))
        status, headers, _ = await _call(s, chat, _chat("llama-3.1-70b-instruct"))
        assert (status, headers["X-Route-Pair"]) == (200, FALLBACK_PAIR), "failover"
        fleet.set_faults(BREAKING_PAIR, FaultConfig(break_stream_rate=1.0, break_after_chunks=2))
        status, _, text = await _call(s, chat, _chat(BREAKING_PAIR, stream=True))
        assert (status, '"error"' in text) == (200, True), "stream broken after the first byte"
        status, _, _ = await _call(s, chat, _chat("no-such-model"))
        assert status == 404, "no route: unknown model"
        status, _, text = await _call(
            s, chat, _chat("auto"), **{"X-Budget-Mode": "strict", "X-Latency-Budget-Ms": "1"}
        )
        assert (status, "budget_infeasible" in text) == (400, True), "no route: strict budget"
        unsure = {
            "role": "user",
            "content": "Compare these two options and tell me which is better.",
        }
        status, headers, _ = await _call(s, chat, _chat("auto", messages=[unsure]))
        assert (status, "category_uncertain" in headers["X-Route-Reason"]) == (200, True)
        # answers without max_tokens, enough of them for a learned output length
        learn = {"model": PRECISE_PAIR, "messages": [{"role": "user", "content": "Say hi."}]}
        for _ in range(OUTPUT_SAMPLES):
            status, _, _ = await _call(s, chat, learn, **{"X-Task-Category": "chat"})
            assert status == 200, "an answer its output length is learned from"


async def _shadow_traffic(stack: Stack) -> None:
    """Publish a table in shadow mode through the admin API, then route one request."""
    async with client(ADMIN) as admin:
        async with admin.get(f"{stack.cp_url}/v1/policy") as resp:
            policy = await resp.json()
        policy["shadow"] = {"enabled": True, "default_pair": SHADOW_PAIR}
        async with admin.put(f"{stack.cp_url}/v1/policy", json=policy) as resp:
            assert resp.status == 200, await resp.text()
        async with admin.post(f"{stack.cp_url}/v1/tables") as resp:
            assert resp.status == 201, await resp.text()
            version = (await resp.json())["version"]
    await eventually(lambda: stack.dp_app[STORE].version == version, timeout_s=30)
    async with client() as s:
        status, headers, _ = await _call(s, f"{stack.dp_url}/v1/chat/completions", _chat("auto"))
    assert (status, headers["X-Route-Reason"]) == (200, "shadow")


async def _accuracy_check_traffic(stack: Stack) -> None:
    """Publish a table that re-asks every lower-precision answer on the reference pair, then
    route one math request to a lower-precision pair (shadow off again)."""
    async with client(ADMIN) as admin:
        async with admin.get(f"{stack.cp_url}/v1/policy") as resp:
            policy = await resp.json()
        policy["shadow"] = {"enabled": False}
        policy["accuracy_check"] = {"sample_rate": 1.0}
        async with admin.put(f"{stack.cp_url}/v1/policy", json=policy) as resp:
            assert resp.status == 200, await resp.text()
        async with admin.post(f"{stack.cp_url}/v1/tables") as resp:
            assert resp.status == 201, await resp.text()
            version = (await resp.json())["version"]
    await eventually(lambda: stack.dp_app[STORE].version == version, timeout_s=30)
    async with client() as s:
        body = {**_chat(CHECKED), "messages": [{"role": "user", "content": CHECKED_PROMPT}]}
        url = f"{stack.dp_url}/v1/chat/completions"
        status, headers, _ = await _call(s, url, body, **{"X-Task-Category": "math"})
    assert (status, headers["X-Route-Pair"]) == (200, CHECKED)


async def _scrape(stack: Stack) -> Scraped:
    async with client() as s:
        async with s.get(f"{stack.cp_url}/metrics") as resp:
            cp = await resp.text()
        async with s.get(f"{stack.dp_url}/metrics") as resp:
            dp = await resp.text()
    return Scraped(cp, dp)


@pytest.fixture
async def scraped(
    aiohttp_server: ServerFactory,
    redis_server: RedisProcess,
    redis_client: aioredis.Redis,
    redis_keys: RedisKeys,
) -> AsyncIterator[Scraped]:
    reports = example_reports()
    config = SimFleetConfig(pairs=[_sim_pair(p, r) for p, r in reports.items()])
    async with run_fleet(config, answers={CHECKED_PROMPT: KnownAnswer("math", "42")}) as fleet:
        stack = await start_stack(
            aiohttp_server,
            redis_server.url,
            redis_client,
            redis_keys,
            _simulated(reports, fleet),
            dp={"scrape_interval_s": 0.2, "breaker_consecutive_failures": 1,
                "breaker_cooldown_s": 60.0, "breaker_cooldown_max_s": 60.0,
                "feedback_interval_s": 0.2, "feedback_canary_items_per_minute": 600.0,
                "feedback_canary_items_file": str(HOLDOUT_MATH)},
            cp={"refit_check_interval_s": 0.2},
        )  # fmt: skip
        await _traffic(stack, fleet)
        await _shadow_traffic(stack)
        await _accuracy_check_traffic(stack)

        async def depth_scraped() -> bool:
            return "gearbox_engine_queue_depth" in series_names((await _scrape(stack)).data_plane)

        await eventually(depth_scraped, timeout_s=30, what="the data plane scrapes the engines")

        async def drift_exported() -> bool:
            names = series_names((await _scrape(stack)).control_plane)
            return "gearbox_cp_latency_drift_ratio" in names

        await eventually(drift_exported, timeout_s=30, what="the control plane merges feedback")

        async def agreement_exported() -> bool:
            names = series_names((await _scrape(stack)).control_plane)
            return "gearbox_cp_live_agreement_ratio" in names

        await eventually(agreement_exported, timeout_s=30, what="re-asks reach the control plane")

        async def canary_exported() -> bool:
            names = series_names((await _scrape(stack)).control_plane)
            return "gearbox_cp_canary_items" in names

        await eventually(canary_exported, timeout_s=30, what="canary counts reach the loop")
        yield await _scrape(stack)


async def test_every_metric_the_infra_uses_is_exported_with_series(scraped: Scraped) -> None:
    used = metric_names_in_infra()
    assert len(used) >= 20, "the infra parser found suspiciously few names"
    assert missing_series(used, scraped) == []


async def test_the_traffic_moved_every_metric_it_can(scraped: Scraped) -> None:
    """Label children are created ahead of use (every pair's series at 0), so presence alone
    would not show that an event was counted: all but these few must be non-zero."""
    moved = moved_names(scraped.data_plane) | moved_names(scraped.control_plane)
    assert set(documented_metrics()) - moved - ZERO_HERE == set()


async def test_every_documented_metric_is_exported_with_series(scraped: Scraped) -> None:
    assert missing_series(set(documented_metrics()), scraped) == []


def test_series_names_ignores_families_without_samples() -> None:
    text = (
        "# HELP gearbox_a_total a\n# TYPE gearbox_a_total counter\n"
        "# HELP gearbox_b b\n# TYPE gearbox_b gauge\ngearbox_b 1\n"
    )
    assert series_names(text) == {"gearbox_b"}
    assert moved_names(text) == {"gearbox_b"}
    assert moved_names(text.replace("gearbox_b 1", "gearbox_b 0")) == set()
    assert missing_series({"gearbox_a_total", "gearbox_b"}, Scraped("", text)) == [
        "gearbox_a_total (data_plane)"
    ]
    assert missing_series({BOTH}, Scraped("", "")) == [
        f"{BOTH} (control_plane)",
        f"{BOTH} (data_plane)",
    ]
