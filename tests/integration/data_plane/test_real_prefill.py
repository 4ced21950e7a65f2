"""A real vLLM CPU engine prefilling a long prompt is not cut as a hang; a hung one still is.

Issue 36 item 2: an engine gives no progress signal inside a prefill step. These tests run
one real engine (gemma-3-270m bf16, one core for the model, `--max-model-len 4096`) twice:
prefilling a ~2,700-token prompt in ONE step (`--max-num-batched-tokens 4096`: no series of
its `/metrics` moves until the first token; the engine the real stack test used before,
tests/support/shared_engine.py) and in chunks of 256 tokens (chunked prefill:
`vllm:kv_cache_usage_perc` grows per chunk, `vllm:num_requests_running` is 1 from the first
chunk, the token counters still wait for the first token). Each time the engine is profiled
briefly (prompts of 64 and 1,024 tokens), published, and routed to through the data plane;
the long streamed prompt must be answered, with no stall counted and no breaker opened, while
its prefill takes longer than the silence that ejects an engine on an ordinary prompt. Then
the engine's API server is stopped (SIGSTOP: no byte, no `/metrics`) and an ordinary prompt
must still be given up on and the breaker opened. Figures: docs/engines.md, "A long prompt on
a real engine".
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from demo.engine_check import check_engines
from demo.fleet import FleetPair, check_engine_memory, fleet_pair, launch_engines
from demo.processes import Child
from demo.profiling import Sweep, profile_pair
from demo.stack import fetch_text, publish_table, start_control_plane, start_data_plane
from tests.e2e.test_real_engine import run_setup, small_evalset
from tests.support.redis_server import running_redis
from tests.support.shared_engine import ONE_STEP_FLAGS, SharedEngine

pytestmark = [pytest.mark.engine, pytest.mark.timeout(1800)]

PAIR = "gemma-3-270m@bf16"
# Sentences of ~12 tokens: ~2,700 prompt tokens, under the 4,096-token context also by the
# data plane's own estimate from characters.
PROMPT_SENTENCES = 220
# The silence that ejects an engine on an ordinary prompt: ENGINE_STALL_OPEN_WINDOWS (3) x
# ENGINE_STALL_WINDOW_S (1.5 s) (docs/reliability.md). A prefill shorter than this would not
# tell a prefill from a hang, so the test checks its own premise.
HANG_SILENCE_S = 4.5
SWEEP = Sweep("1,2", "64,1024", "4", requests_per_level=3, warmup=1, parallel=1)
# prefilled in one step, or in chunks of 256 tokens
BATCHED_TOKENS = {"one-step": "4096", "chunked": "256"}
SAMPLE_S = 0.2
WATCHED = (
    "vllm:num_requests_running",
    "vllm:kv_cache_usage_perc",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
)


@dataclass(frozen=True, slots=True)
class PrefillStack:
    mode: str
    engine: FleetPair
    engine_child: Child
    data_plane_url: str


def long_prompt(tag: str) -> str:
    """~2,700 tokens; `tag` first, so no two requests share a cached prefix."""
    body = " ".join(
        f"The quick brown fox number {i} jumps over the lazy dog." for i in range(PROMPT_SENTENCES)
    )
    return f"[{tag} {time.time_ns()}] {body}\nHow many foxes were there?"


async def start_stack(
    children: ExitStack, mode: str, shared: SharedEngine, redis_url: str, out: Path
) -> PrefillStack:
    logs = out / "logs"
    if mode == "one-step":  # the shared engine's flags
        assert ONE_STEP_FLAGS[-1] == BATCHED_TOKENS[mode]
        engine = await shared.working()
    else:
        flags = ("--max-model-len", "4096", "--", "--max-num-batched-tokens", BATCHED_TOKENS[mode])
        started = launch_engines(children, ("bf16",), logs, 1, flags)
        working, dropped = await check_engines(started, 600.0)
        assert not dropped, [d.line() for d in dropped]
        (engine,) = working
    pair = fleet_pair(engine)
    cp_url, token = await start_control_plane(children, redis_url, logs)
    sweep = replace(SWEEP, evalsets=(small_evalset(out / "evals.jsonl"),))
    await profile_pair(pair, sweep, cp_url, token, out)
    await publish_table(cp_url, token)
    # No canary items: they are traffic at the engine, and the test reads its counters.
    dp_url, _ = await start_data_plane(children, redis_url, logs, canary_per_minute=0)
    return PrefillStack(mode, pair, engine.engine.child, dp_url)


@pytest.fixture(scope="module", params=list(BATCHED_TOKENS))
def stack(
    request: pytest.FixtureRequest,
    shared_bf16_engine: SharedEngine,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[PrefillStack]:
    problem = check_engine_memory(1, 1)
    if problem is not None:
        pytest.fail(problem)
    run_setup()
    out = tmp_path_factory.mktemp(f"prefill-{request.param}")
    try:
        with running_redis() as redis, ExitStack() as children:
            yield asyncio.run(
                start_stack(children, request.param, shared_bf16_engine, redis.url, out)
            )
    finally:
        # the shared engine's last user (its API server was stopped and continued): one engine
        # up at a time in the `heavy` group, so it goes before the chunked case starts its own
        shared_bf16_engine.stop()


def engine_series(text: str) -> dict[str, float]:
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name in WATCHED
    }


def router_count(text: str, name: str, **labels: str) -> float:
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
    )


@dataclass(frozen=True, slots=True)
class Streamed:
    status: int
    pair: str | None
    first_byte_s: float
    body: str
    samples: list[tuple[float, dict[str, float]]]  # (seconds after sending, watched series)


async def stream_and_watch(stack: PrefillStack, prompt: str) -> Streamed:
    """Stream `prompt` through the data plane; read the engine's /metrics every 200 ms until
    the first byte."""
    body = {"model": "auto", "prompt": prompt, "max_tokens": 4, "temperature": 0, "stream": True}
    timeout = aiohttp.ClientTimeout(total=240)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        samples: list[tuple[float, dict[str, float]]] = []
        start = time.monotonic()

        async def watch() -> None:
            while True:
                async with session.get(f"{stack.engine.url}/metrics") as page:
                    samples.append((time.monotonic() - start, engine_series(await page.text())))
                await asyncio.sleep(SAMPLE_S)

        watcher = asyncio.create_task(watch())
        try:
            async with session.post(f"{stack.data_plane_url}/v1/completions", json=body) as answer:
                first = await answer.content.readany()
                first_byte_s = time.monotonic() - start
                text = first.decode(errors="replace") + await answer.text()
                return Streamed(
                    answer.status, answer.headers.get("x-route-pair"), first_byte_s, text, samples
                )
        finally:
            watcher.cancel()


def moved_before(streamed: Streamed, series: str, before_s: float) -> list[float]:
    """The distinct values `series` showed in samples taken before `before_s`, after the first."""
    values = [s[series] for t, s in streamed.samples if t < before_s and series in s]
    return sorted({v for v in values if v != values[0]}) if values else []


def test_a_long_prompt_the_engine_is_prefilling_is_answered_not_cut_as_a_hang(
    stack: PrefillStack,
) -> None:
    before = asyncio.run(fetch_text(f"{stack.data_plane_url}/metrics"))
    streamed = asyncio.run(stream_and_watch(stack, long_prompt(stack.mode)))
    after = asyncio.run(fetch_text(f"{stack.data_plane_url}/metrics"))
    moves = {w: moved_before(streamed, w, streamed.first_byte_s) for w in WATCHED}
    print(
        f"\n{stack.mode}: first byte after {streamed.first_byte_s:.1f} s; values before it: {moves}"
    )
    assert streamed.status == 200, streamed.body[:500]
    assert streamed.pair == PAIR
    assert "[DONE]" in streamed.body
    # the premise: this prefill lasted longer than the silence that ejects a hung engine
    assert streamed.first_byte_s > HANG_SILENCE_S, (
        f"the prefill took {streamed.first_byte_s:.1f} s, too short to tell from a hang here; "
        "lengthen the prompt"
    )
    for name, labels in [
        ("gearbox_circuit_transitions_total", {"to": "open"}),
        ("gearbox_upstream_attempts_total", {"outcome": "timeout_first_byte"}),
    ]:
        assert router_count(after, name, **labels) == router_count(before, name, **labels), name
    # What the engine showed while it prefilled (docs/engines.md): in one step, nothing until
    # the step ended; in chunks, the KV cache's use grew chunk by chunk.
    quiet_until = streamed.first_byte_s - 1.0
    if stack.mode == "one-step":
        for series in WATCHED:
            assert moved_before(streamed, series, quiet_until) == [], series
    else:
        assert len(moved_before(streamed, "vllm:kv_cache_usage_perc", quiet_until)) >= 3
        assert moved_before(streamed, "vllm:prompt_tokens_total", quiet_until) == []


def test_an_ordinary_prompt_on_a_hung_engine_is_still_given_up_on(stack: PrefillStack) -> None:
    """Runs after the long prompt: the engine's API server stopped (SIGSTOP) answers nothing,
    neither the request nor /metrics; the hang rule for an ordinary prompt is unchanged."""
    before = asyncio.run(fetch_text(f"{stack.data_plane_url}/metrics"))
    pid = stack.engine_child.process.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        streamed = asyncio.run(stream_and_watch_router_only(stack, "One, two, three, four,"))
    finally:
        os.kill(pid, signal.SIGCONT)
    after = asyncio.run(fetch_text(f"{stack.data_plane_url}/metrics"))
    print(f"\n{stack.mode}, engine stopped: {streamed.status} after {streamed.first_byte_s:.1f} s")
    assert streamed.status in (503, 504), streamed.body[:500]
    opened = {"to": "open"}
    name = "gearbox_circuit_transitions_total"
    assert router_count(after, name, **opened) > router_count(before, name, **opened)


async def stream_and_watch_router_only(stack: PrefillStack, prompt: str) -> Streamed:
    """`stream_and_watch` without reading the engine (a stopped engine answers no /metrics)."""
    body = {"model": "auto", "prompt": prompt, "max_tokens": 4, "temperature": 0, "stream": True}
    timeout = aiohttp.ClientTimeout(total=120)
    start = time.monotonic()
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.post(f"{stack.data_plane_url}/v1/completions", json=body) as answer,
    ):
        text = await answer.text()
        return Streamed(
            answer.status, answer.headers.get("x-route-pair"), time.monotonic() - start, text, []
        )
