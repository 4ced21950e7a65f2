"""The real path: one vLLM CPU engine (bf16), profiled, published, and routed to through the
data plane. The other variants `make demo` starts are smoked in test_real_variants.py, on
another xdist worker (docs/style.md, "Tests"). The engine is the one the prefill test's one-step
case uses next (tests/support/shared_engine.py: one core, a 4,096-token context).

The fixture runs the idempotent engine set-up and FAILS, never skips, when the set-up, the
memory check or the engine start fails: this test is what proves the real path.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tokenizers import Tokenizer

from contracts.prompt_text import prompt_text
from demo.fleet import ENGINES_CLI, FleetPair, check_engine_memory, fleet_pair
from demo.profiling import EVALSETS, Sweep, profile_pair
from demo.stack import fetch_text, publish_table, start_control_plane, start_data_plane
from demo.variants import (
    REAL_VARIANTS,
)
from tests.support.redis_server import RedisProcess
from tests.support.shared_engine import CONTEXT_TOKENS, SharedEngine
from tests.support.waiting import eventually

pytestmark = [pytest.mark.engine, pytest.mark.timeout(1800)]

PAIR = "gemma-3-270m@bf16"
COUNTING = "One, two, three, four,"
# A short sweep: two load levels, a handful of requests, eight eval items.
SWEEP = Sweep("1,2", "16,64", "8", requests_per_level=3, warmup=1, parallel=1)
EVAL_IDS = {"chat-01", "chat-02", "math-01", "math-02", "code-01", "code-02", "reasoning-02"}


@dataclass(frozen=True, slots=True)
class RealStack:
    engine: FleetPair
    table: dict[str, Any]
    data_plane_url: str


def small_evalset(path: Path) -> Path:
    lines = [
        line
        for evalset in EVALSETS
        for line in evalset.read_text().splitlines()
        if line.strip() and json.loads(line).get("id") in EVAL_IDS
    ]
    assert len(lines) == len(EVAL_IDS), "the shipped eval sets changed; update EVAL_IDS"
    path.write_text("\n".join(lines) + "\n")
    return path


def run_setup(variants: str = "bf16") -> None:
    argv = [sys.executable, str(ENGINES_CLI), "setup", "--variants", variants]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=1500, check=False)
    if done.returncode != 0:
        pytest.fail(f"engine set-up failed (exit {done.returncode}):\n{done.stdout[-4000:]}")


async def start_stack(
    children: ExitStack, shared: SharedEngine, redis_url: str, out: Path
) -> RealStack:
    logs = out / "logs"
    engine = fleet_pair(await shared.working())
    cp_url, token = await start_control_plane(children, redis_url, logs)
    sweep = replace(SWEEP, evalsets=(small_evalset(out / "evals.jsonl"),))
    await profile_pair(engine, sweep, cp_url, token, out)
    table = await publish_table(cp_url, token)
    dp_url, _ = await start_data_plane(children, redis_url, logs)
    return RealStack(engine, table, dp_url)


@pytest.fixture(scope="module")
def real_stack(
    redis_server: RedisProcess,
    shared_bf16_engine: SharedEngine,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[RealStack]:
    problem = check_engine_memory(1, 1)
    if problem is not None:
        pytest.fail(problem)
    run_setup()
    out = tmp_path_factory.mktemp("real-engine")
    with ExitStack() as children:
        # A start-up failure raises here: the tests error (never skip), with the logs' tails.
        yield asyncio.run(start_stack(children, shared_bf16_engine, redis_server.url, out))


@pytest.fixture
def client(real_stack: RealStack) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=f"{real_stack.data_plane_url}/v1", api_key="e2e", max_retries=0, timeout=120
    ) as sdk:
        yield sdk


def test_the_stack_engine_answered_its_smoke_completion(real_stack: RealStack) -> None:
    """bf16's smoke completion, the one `make demo` runs: the stack's engine is started and
    checked as `start_real_engines` does it (`launch_engines`, then `check_engines`);
    test_real_variants.py smokes the other variants."""
    assert real_stack.engine.quantization == REAL_VARIANTS["bf16"]
    assert real_stack.engine.smoke_tokens_per_s > 0


def test_the_published_table_holds_what_the_profiler_measured(real_stack: RealStack) -> None:
    (entry,) = real_stack.table["entries"]
    assert entry["pair"] == PAIR
    assert entry["served_model_name"] == real_stack.engine.served_name
    assert set(entry["accuracy"]) >= {"chat", "math", "code", "reasoning"}
    assert entry["latency"]["tpot_base_s"] > 0
    assert entry["context_length"] == CONTEXT_TOKENS  # what the shared engine reports
    assert entry["price_source"] == "derived"
    assert entry["output_usd_per_mtok"] > 0


def test_a_completion_is_routed_to_the_real_engine(
    real_stack: RealStack, client: openai.OpenAI
) -> None:
    raw = client.completions.with_raw_response.create(
        model="auto", prompt=COUNTING, max_tokens=8, temperature=0,
        extra_headers={"X-Task-Category": "reasoning"},
    )  # fmt: skip
    completion = raw.parse()
    assert raw.headers["x-route-pair"] == PAIR
    assert raw.headers["x-route-table-version"] == str(real_stack.table["version"])
    assert "five" in completion.choices[0].text
    assert completion.usage is not None
    assert completion.usage.completion_tokens > 0


def test_a_stream_arrives_in_chunks_with_usage(client: openai.OpenAI) -> None:
    with client.completions.with_streaming_response.create(
        model="gemma-3-270m", prompt=COUNTING, max_tokens=12, temperature=0, stream=True,
        stream_options={"include_usage": True},
    ) as response:  # fmt: skip
        assert response.headers["x-route-pair"] == PAIR
        chunks = list(response.parse())
    texts = [c.choices[0].text for c in chunks if c.choices]
    assert len([t for t in texts if t]) > 3
    assert "five" in "".join(texts)
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 12


def test_chat_goes_through_the_converted_chat_template(client: openai.OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model=PAIR, messages=[{"role": "user", "content": "Say hello."}], max_tokens=8,
    )  # fmt: skip
    assert raw.headers["x-route-pair"] == PAIR
    answer = raw.parse()
    assert answer.choices[0].message.content
    assert answer.usage is not None
    assert answer.usage.prompt_tokens > 4


def test_an_impossible_strict_budget_is_a_400_naming_the_constraint(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(
            model="auto", prompt=COUNTING, max_tokens=8,
            extra_headers={"X-Latency-Budget-Ms": "1", "X-Budget-Mode": "strict"},
        )  # fmt: skip
    assert caught.value.code == "budget_infeasible"


def test_the_router_counted_cost_for_the_pair(real_stack: RealStack, client: openai.OpenAI) -> None:
    client.completions.create(model="auto", prompt=COUNTING, max_tokens=4, temperature=0)
    metrics = asyncio.run(fetch_text(f"{real_stack.data_plane_url}/metrics"))
    costs = [
        s.value
        for family in text_string_to_metric_families(metrics)
        if family.name == "gearbox_cost_usd"
        for s in family.samples
        if s.name.endswith("_total") and s.labels.get("pair") == PAIR
    ]
    assert costs
    assert costs[0] > 0


# A chat body with several turns and a tools list, large enough to be counted by the
# tokenizer (TABLE_TOKENIZE_MIN_BYTES, 8 KiB), small enough for a 2,048-token context:
# the shipped Gemma template renders no tools, so the engine sees the turns alone.
COUNTED_TURNS = [
    {"role": "system", "content": "You answer questions about the inventory, briefly."},
    {"role": "user", "content": "Which shelves hold the spare parts for the older pumps? " * 6},
    {"role": "assistant", "content": "Shelves 4 and 7 hold them; 7 has the seals and gaskets."},
    {"role": "user", "content": "And how many seals are left, counting the returned ones? " * 6},
    {"role": "assistant", "content": "Forty-two seals, eleven of them returned last month."},
    {"role": "user", "content": "Order twenty more and tell me when they arrive."},
]
COUNTED_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": f"inventory_action_{i}",
            "description": "Look up, reserve or reorder an inventory item by its key.",
            "parameters": {
                "type": "object",
                "properties": {
                    "key": {"type": "string", "description": "the item's stock key"},
                    "quantity": {"type": "integer", "minimum": 1},
                    "shelf": {"type": "string", "enum": ["s1", "s4", "s7"]},
                },
                "required": ["key"],
            },
        },
    }
    for i in range(20)
]


async def _routed_input_tokens(url: str, body: dict[str, Any], expect: int) -> int:
    """The input tokens `/v1/route` reports for `body`, once the data plane has loaded the
    tokenizer (in a thread, when the table arrived): polled until near `expect`."""
    seen: list[int] = []

    async def near() -> bool:
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"{url}/v1/route", json=body) as resp,
        ):
            assert resp.status == 200, await resp.text()
            explained = await resp.json()
        # no route, or another figure: priced per character until the file is loaded
        seen.append(explained.get("tokens", {}).get("input", -1))
        return abs(seen[-1] - expect) <= max(2, expect // 50)

    try:
        await eventually(near, timeout_s=60, interval_s=0.5, what="the tokenizer's count")
    except AssertionError as err:
        raise AssertionError(f"/v1/route reported {seen[-3:]}, the engine {expect}") from err
    return seen[-1]


def test_a_chat_prompt_is_counted_as_the_engine_counts_it(
    real_stack: RealStack, client: openai.OpenAI
) -> None:
    """The profiler measured what the shipped Gemma turn format adds (5 tokens per prompt: BOS
    and the generation prompt; 4 per turn; tools not rendered; each turn's text trimmed) and
    the table carries it: for several turns (two with a trailing space) and a tools list, the
    data plane's count is the engine's usage.prompt_tokens exactly: measured 221 and 221
    (7b80295 read 223 at 4.0 characters per token, the turns not trimmed, and one more
    through this stack, the estimate's characters rounded up). The text alone counted
    (c0edadc) is off by the tools' JSON and the turn markers; measured figures in
    docs/data_plane.md, "Prompt size"."""
    (entry,) = real_stack.table["entries"]
    template = entry["tokenizer"]["template"]
    assert template == {
        "fixed": 5.0,
        "per_message": 4.0,
        "tools_fixed": 0.0,
        "tools_scale": 0.0,
        "trims": True,
    }
    body: dict[str, Any] = {
        "model": PAIR,
        "messages": COUNTED_TURNS,
        "tools": COUNTED_TOOLS,
        "tool_choice": "none",  # the engine has no tool parser: "auto" is its 400
        "max_tokens": 1,
        "temperature": 0,
    }
    assert len(json.dumps(body)) >= 8192
    sent = body | {"model": real_stack.engine.served_name}
    with openai.OpenAI(base_url=f"{real_stack.engine.url}/v1", api_key="e2e") as engine_sdk:
        usage = engine_sdk.chat.completions.create(**sent).usage
    assert usage is not None
    engine = usage.prompt_tokens
    routed = asyncio.run(_routed_input_tokens(real_stack.data_plane_url, body, engine))
    answer = client.chat.completions.create(**body)  # routed through the data plane
    assert answer.usage is not None
    assert answer.usage.prompt_tokens == engine
    tokenizer = Tokenizer.from_file(entry["tokenizer"]["id"])
    text_alone = len(tokenizer.encode(prompt_text(body), add_special_tokens=False).ids)
    per_character = len(json.dumps(body["tools"])) + sum(len(t["content"]) for t in COUNTED_TURNS)
    print(
        f"engine {engine}, counted with the template {routed}, text alone {text_alone}, "
        f"per character {per_character / entry['chars_per_token']:.0f}"
    )
    assert routed == engine
    assert text_alone > engine * 1.5  # what the template adds and drops matters here


def test_a_completions_prompt_is_counted_with_the_bos_the_engine_adds(
    real_stack: RealStack, client: openai.OpenAI
) -> None:
    """vLLM's /v1/completions adds Gemma's `<bos>` to the prompt (`add_special_tokens`): the
    profiler measured it (`special_tokens` 1), and the data plane's count of a prompt over the
    size floor is the engine's usage.prompt_tokens exactly (7b80295: the text alone, one
    short)."""
    (entry,) = real_stack.table["entries"]
    assert entry["tokenizer"]["special_tokens"] == 1
    prompt = " ".join(t["content"] for t in COUNTED_TURNS) * 10
    body: dict[str, Any] = {"model": PAIR, "prompt": prompt, "max_tokens": 1, "temperature": 0}
    assert len(json.dumps(body)) >= 8192
    sent = body | {"model": real_stack.engine.served_name}
    with openai.OpenAI(base_url=f"{real_stack.engine.url}/v1", api_key="e2e") as engine_sdk:
        usage = engine_sdk.completions.create(**sent).usage
    assert usage is not None
    engine = usage.prompt_tokens
    routed = asyncio.run(_routed_input_tokens(real_stack.data_plane_url, body, engine))
    answer = client.completions.create(**body)  # routed through the data plane
    assert answer.usage is not None
    assert answer.usage.prompt_tokens == engine
    tokenizer = Tokenizer.from_file(entry["tokenizer"]["id"])
    text_alone = len(tokenizer.encode(prompt, add_special_tokens=False).ids)
    print(f"engine {engine}, counted {routed}, text alone {text_alone}")
    assert text_alone == engine - 1
    assert routed == engine
