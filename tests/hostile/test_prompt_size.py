"""A prompt the router sizes as the engine does (docs/data_plane.md, "Prompt size"): a client's
`tools` are prompt the engine prefills, and a prefill is allowed the time it takes
(docs/reliability.md, "What a breaker counts").

Simulated engines that prefill exactly as the shipped 70B profiles say (examples/profiles:
awq-int4 0.17 ms and fp8 0.15 ms per input token, 4.1 characters per token, context 32,768),
counting `tools` into the prompt as vLLM does, behind a data plane from `create_app` (static
mode, the table the control plane builds from those reports; the engines' token counters read
while attempts wait overdue, as shipped).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from contracts.policy import Policy
from contracts.profile_report import ProfileReport
from control_plane.build.table import build_table
from data_plane.app import AppDeps, create_app
from data_plane.settings import DataPlaneSettings
from data_plane.upstream.port import UpstreamRequest
from profiler.engine.client import EngineClient
from profiler.engine.token_rates import measure_json_chars_per_token
from simulator import Fleet, SimFleetConfig, SimPairConfig, run_fleet
from tests.component.data_plane import conftest as component
from tests.component.data_plane.conftest import Harness, MakeHarness
from tests.component.data_plane.fakes import FakeResponse, chat_json, two_pair_table
from tests.hostile.test_engine_blame import blamed, opened, post
from tests.reliability.stack import EXAMPLES, NOW, metric
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration
make_harness = component.make_harness  # the component harness: create_app, a FakeUpstream
FP16, INT4 = "http://fp16-a", "http://int4-a"

FAMILY = "llama-3.1-70b-instruct"
QUANTS = ("awq-int4", "fp8")
PRICE_USD_PER_MTOK = {"awq-int4": 0.3, "fp8": 0.6}
CHARS_PER_TOKEN = 4.1  # the profiles'
TOOLS_TOKENS = 31_500  # the tool list


def _pair(quant: str) -> str:
    return f"{FAMILY}@{quant}"


def _served(quant: str) -> str:
    return f"sim/{FAMILY}-{quant}"


def _report(quant: str, urls: Sequence[str], json_rate: float | None = None) -> ProfileReport:
    """The shipped report, served by `urls`; `json_rate`: the JSON characters per token the
    profiler measured (the shipped reports carry none)."""
    data = json.loads((EXAMPLES / f"{FAMILY}@{quant}.json").read_text(encoding="utf-8"))
    price = PRICE_USD_PER_MTOK[quant]
    data |= {
        "endpoints": list(urls),
        "served_model_name": _served(quant),
        "prices": {"input_usd_per_mtok": price, "output_usd_per_mtok": 2 * price},
        "json_chars_per_token": json_rate,
    }
    return ProfileReport.model_validate(data)


def _as_profiled(quant: str, json_rate: float = CHARS_PER_TOKEN) -> SimPairConfig:
    """The engine as its report says: its TTFT line (base and per input token) and TPOT;
    it counts `tools` at `json_rate` characters per token (as prose by default)."""
    table = build_table([_report(quant, ["http://127.0.0.1:1"])], Policy(), NOW)
    line = table.entries[0].latency
    return SimPairConfig(
        name=_served(quant),
        family=FAMILY,
        quantization=quant,
        ttft_base_s=line.ttft_base_s,
        ttft_per_input_token_s=line.ttft_per_input_token_s,
        tpot_base_s=line.tpot_base_s,
        max_running=64,
        context_length=32_768,
        chars_per_token=CHARS_PER_TOKEN,
        json_chars_per_token=json_rate,
    )


@asynccontextmanager
async def _data_plane(
    urls: Mapping[str, Sequence[str]], tmp_path: Path, json_rate: float | None = None
) -> AsyncIterator[tuple[str, web.Application]]:
    table = build_table([_report(q, u, json_rate) for q, u in urls.items()], Policy(), NOW)
    assert {e.json_chars_per_token for e in table.entries} == {json_rate}
    snapshot = tmp_path / "table.json"
    snapshot.write_text(table.model_dump_json())
    values: dict[str, Any] = {
        "host": "127.0.0.1",
        "redis_url": "",
        "snapshot_path": snapshot,
        "scrape_interval_s": 0.0,
        "breaker_consecutive_failures": 3,
        "instance_id": "hostile-prompt",
    }
    settings = DataPlaneSettings(**values)
    server = TestServer(create_app(settings, AppDeps()), host="127.0.0.1")
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/"), server.app
    finally:
        await server.close()


def _tools(tokens: int) -> list[dict[str, Any]]:
    """Function tools whose JSON is about `tokens` tokens at the profiles' 4.1 chars/token."""
    tools: list[dict[str, Any]] = []
    size = 0
    while size < tokens * CHARS_PER_TOKEN:
        tool = {
            "type": "function",
            "function": {
                "name": f"lookup_{len(tools)}",
                "description": "Look a record up in the inventory by its key " * 4,
                "parameters": {
                    "type": "object",
                    "properties": {"key": {"type": "string"}, "limit": {"type": "integer"}},
                    "required": ["key"],
                },
            },
        }
        tools.append(tool)
        size += len(json.dumps(tool)) + 2
    return tools


def _ordinary() -> dict[str, Any]:
    return {
        "model": "auto",
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": 8,
        "stream": True,
    }


async def test_a_tools_heavy_streamed_prompt_is_prefilled_not_ejected(tmp_path: Path) -> None:
    """The issue's reproduction: one streamed request whose 31.5k tokens are nearly all
    `tools` (no budget). On 95376ca the router sized it from its text ("Which item is low?",
    5 tokens): the first byte was allowed 3 x 0.11 s, both engines' 5 s prefills were
    ejected as hangs (no byte, then still counters), the client got 504 and the next
    client's ordinary request 503. Sized with its tools, its first byte is allowed three
    times the profiled prefill: it is answered, no breaker opens, and other clients are
    served meanwhile and after."""
    config = SimFleetConfig(pairs=[_as_profiled(q) for q in QUANTS])
    async with run_fleet(config, answers={}) as fleet:
        urls = {q: [fleet.url(_served(q))] for q in QUANTS}
        async with (
            _data_plane(urls, tmp_path) as (url, app),
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session,
        ):
            heavy = {
                "model": "auto",
                "messages": [{"role": "user", "content": "Which item is low?"}],
                "tools": _tools(TOOLS_TOKENS),
                "max_tokens": 16,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
            big = asyncio.create_task(post(session, url, heavy))
            await eventually(lambda: sum(fleet.stats(_served(q)).received for q in QUANTS) >= 1)
            meanwhile = await post(session, url, _ordinary())
            status, pair, raw = await big
            after = await post(session, url, _ordinary())
            assert status == 200, raw[:300]
            assert b"[DONE]" in raw
            assert meanwhile[0] == 200, meanwhile[2][:300]
            assert after[0] == 200, after[2][:300]
            for quant in QUANTS:
                assert opened(app, f"{_pair(quant)}#0") == 0
                assert blamed(app, f"{_pair(quant)}#0") == 0
            # Served where it was sent, once: the engine's count over the estimate is ~1.
            assert sum(fleet.stats(_served(q)).received for q in QUANTS) == 3
            ratio = (pair, "gearbox_prompt_estimate_ratio")
            count = metric(app, f"{ratio[1]}_count", pair=pair)
            total = metric(app, f"{ratio[1]}_sum", pair=pair)
            assert count >= 1
            assert 0.9 < total / count < 1.1, total / count


def _checked_answer(req: UpstreamRequest) -> FakeResponse:
    return FakeResponse(body=chat_json("12", prompt_tokens=10, completion_tokens=2))


async def _ask_math(h: Harness, fields: dict[str, Any]) -> None:
    body = {
        "model": "fam@int4",
        "messages": [{"role": "user", "content": "What is 5 + 7?"}],
        "temperature": 0,
        "max_tokens": 16,
        **fields,
    }
    resp = await h.client.post(
        "/v1/chat/completions", data=json.dumps(body), headers={"X-Task-Category": "math"}
    )
    assert resp.status == 200, await resp.text()


def _checks(h: Harness, outcome: str) -> float:
    labels = {"pair": "fam@int4", "category": "math", "outcome": outcome}
    return h.metric("gearbox_accuracy_checks_total", **labels)


async def test_the_check_cap_counts_a_prompt_s_tools(make_harness: MakeHarness) -> None:
    """The accuracy checks' prompt cap (`accuracy_check.max_input_tokens`, 2,048) reads the
    same estimate: a 14-character question with 3,000 tokens of tools is too long to
    re-ask (on 95376ca it was re-asked at the cost of 5 tokens: checked, not `too_long`),
    while the same question alone is checked."""
    policy = {"accuracy_check": {"sample_rate": 1.0}}
    routes = {FP16: _checked_answer, INT4: _checked_answer}
    h = await make_harness(two_pair_table([FP16], [INT4], policy=policy), routes=routes)
    await _ask_math(h, {"tools": _tools(3_000)})
    await eventually(lambda: _checks(h, "too_long") == 1, timeout_s=10, what="capped")
    assert not [r for r in h.upstream.requests if r.url.startswith(FP16)]
    await _ask_math(h, {})
    await eventually(lambda: _checks(h, "agree") == 1, timeout_s=10, what="checked")
    assert _checks(h, "too_long") == 1


async def _estimate_ratio(fleet: Fleet, tmp_path: Path, json_rate: float | None) -> float:
    """usage.prompt_tokens over the router's estimate for one tools-heavy request, behind a
    data plane whose table is built from reports carrying `json_rate`."""
    urls = {q: [fleet.url(_served(q))] for q in QUANTS}
    heavy = {
        "model": "auto",
        "messages": [{"role": "user", "content": "Which item is low?"}],
        "tools": _tools(6_000),
        "max_tokens": 8,
    }
    async with (
        _data_plane(urls, tmp_path, json_rate) as (url, app),
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session,
    ):
        status, pair, raw = await post(session, url, heavy)
        assert status == 200, raw[:300]
        ratio = "gearbox_prompt_estimate_ratio"
        return metric(app, f"{ratio}_sum", pair=pair) / metric(app, f"{ratio}_count", pair=pair)


async def test_a_measured_json_rate_brings_the_tools_estimate_to_the_engine_s_count(
    tmp_path: Path,
) -> None:
    """Engines that count a tools schema at 3.0 characters per token (a tokenizer splits
    JSON finer than prose; the text is 4.1): the profiler's measurement (`token_rates`)
    reads 3.0 from the engine's usage, the table built from reports carrying it keeps it, and
    the router's estimate for 6,000 tokens of tools moves from 1.37x under the engine's count
    (the prose rate; what c680376 does with any profile) to within 3% of it."""
    config = SimFleetConfig(pairs=[_as_profiled(q, json_rate=3.0) for q in QUANTS])
    async with run_fleet(config, answers={}) as fleet:
        async with aiohttp.ClientSession() as session:
            engine = EngineClient(session, fleet.url(_served(QUANTS[0])), _served(QUANTS[0]), 10)
            measured = await measure_json_chars_per_token(engine)
        assert measured == pytest.approx(3.0, rel=0.01)
        before = await _estimate_ratio(fleet, tmp_path, None)
        after = await _estimate_ratio(fleet, tmp_path, measured)
    assert before == pytest.approx(CHARS_PER_TOKEN / 3.0, rel=0.03)
    assert after == pytest.approx(1.0, abs=0.03)


async def test_routing_sizes_the_prompt_with_its_tools(make_harness: MakeHarness) -> None:
    """Prediction, cost and the context limit read the same estimate: `/v1/route` shows a
    short question with 3,000 tokens of tools as about 3,000 input tokens (5 on 95376ca),
    and 9,000 tokens of tools exceed the pairs' 8,192-token context (routed on 95376ca, and
    the engine refused it)."""
    h = await make_harness(two_pair_table([FP16], [INT4]), routes={})
    tools = _tools(3_000)
    body = {"model": "auto", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 16}
    routed = await (
        await h.client.post("/v1/route", data=json.dumps(body | {"tools": tools}))
    ).json()
    expected = (len(json.dumps(tools)) + len("Hi")) / 4.0  # the table's 4 chars per token
    assert routed["routed"] is True
    assert abs(routed["tokens"]["input"] - expected) <= 1
    too_long = await (
        await h.client.post("/v1/route", data=json.dumps(body | {"tools": _tools(9_000)}))
    ).json()
    assert too_long["binding"] == "context_too_long"


async def test_neighbours_queued_behind_a_long_prefill_do_not_eject_the_engine(
    tmp_path: Path,
) -> None:
    """An engine that runs one request at a time prefills a 31.5k-token prompt (5.5 s, as
    profiled) while other clients' ordinary streams queue behind it, one every 0.4 s: no
    byte to anyone, and their allowances (about 0.35 s) pass. On the stall window of
    95376ca (the floor, 1.5 s, with the prompt sized right) their overdue silence stalled
    the endpoint every window and its breaker opened during a prefill the profile
    predicts; the window is now at least the prefill's allowance, so the engine keeps
    serving: the long prompt is answered, and so is every neighbour."""
    one_slot = _as_profiled("awq-int4").model_copy(update={"max_running": 1})
    config = SimFleetConfig(pairs=[one_slot, _as_profiled("fp8")])
    async with run_fleet(config, answers={}) as fleet:
        urls = {q: [fleet.url(_served(q))] for q in QUANTS}
        async with (
            _data_plane(urls, tmp_path) as (url, app),
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session,
        ):
            heavy = {
                "model": _pair("awq-int4"),
                "messages": [{"role": "user", "content": "Which item is low?"}],
                "tools": _tools(TOOLS_TOKENS),
                "max_tokens": 16,
                "stream": True,
            }
            big = asyncio.create_task(post(session, url, heavy))
            await eventually(lambda: fleet.stats(_served("awq-int4")).received >= 1)
            neighbours = []
            for _ in range(12):
                neighbours.append(asyncio.create_task(post(session, url, _ordinary())))
                await asyncio.sleep(0.4)  # the clients' pace, not a wait for an event
            status, _, raw = await big
            assert status == 200, raw[:300]
            for n_status, _, n_raw in await asyncio.gather(*neighbours):
                assert n_status == 200, n_raw[:300]
            awq = f"{_pair('awq-int4')}#0"
            assert opened(app, awq) == 0
            assert blamed(app, awq) == 0
