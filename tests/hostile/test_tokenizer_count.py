"""Prompts counted by the served model's own tokenizer (docs/data_plane.md, "Prompt size"):
the profiler records the checkpoint's tokenizer file (`/v1/models` root), the control plane
copies it into the table, and the data plane counts large prompts with it.

Simulated engines that count prompt tokens with a real tokenizer file (a byte-level BPE
trained on English prose and JSON, tests/support/tiny_tokenizer.py: a language it never saw
splits into bytes, as a served model's tokenizer splits one it saw little of), behind a data
plane from `create_app` (static mode). The table's characters per token are what the profiler
measures: its own prose prompts (`make_prompt`) for text, its probe tools for JSON.
"""

from __future__ import annotations

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
from contracts.tokenizer_ref import TemplateTokens, TokenizerRef
from control_plane.build.table import build_table
from data_plane.app import COUNTER, AppDeps, create_app
from data_plane.settings import DataPlaneSettings
from profiler.engine.client import EngineClient
from profiler.engine.engine_facts import preflight
from profiler.engine.template_tokens import with_template
from profiler.engine.token_rates import measure_json_chars_per_token
from profiler.load.workload import make_prompt
from simulator import SimFleetConfig, SimPairConfig, run_fleet
from tests.hostile.test_engine_blame import post
from tests.reliability.stack import EXAMPLES, NOW, metric
from tests.support import tiny_tokenizer

pytestmark = pytest.mark.integration

FAMILY = "llama-3.1-70b-instruct"
QUANTS = ("awq-int4", "fp8")
RATIO = "gearbox_prompt_estimate_ratio"
NON_ENGLISH = "Der Fuchs springt über den Hund, während es regnet. 東京は日本の首都です。" * 160


def _served(quant: str) -> str:
    return f"sim/{FAMILY}-{quant}"


def _text_rate(path: Path) -> float:
    """Characters per token of the profiler's own prose prompts by this tokenizer: what its
    calibration measures from usage (`profiler.load`)."""
    prompts = [make_prompt(2_000, 4.0, seed) for seed in range(3)]
    return sum(map(len, prompts)) / sum(tiny_tokenizer.count(path, p) for p in prompts)


def _report(quant: str, urls: Sequence[str], rates: tuple[float, float | None]) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((EXAMPLES / f"{FAMILY}@{quant}.json").read_text("utf-8"))
    return data | {
        "endpoints": list(urls),
        "served_model_name": _served(quant),
        "prices": {"input_usd_per_mtok": 0.3, "output_usd_per_mtok": 0.6},
        "chars_per_token": rates[0],
        "json_chars_per_token": rates[1],
    }


def _engine(quant: str, tokenizer: Path) -> SimPairConfig:
    return SimPairConfig(
        name=_served(quant),
        family=FAMILY,
        quantization=quant,
        ttft_base_s=0.01,
        tpot_base_s=0.001,
        max_running=64,
        context_length=32_768,
        tokenizer=tokenizer,
    )


@asynccontextmanager
async def _data_plane(
    reports: Sequence[dict[str, Any]], tmp_path: Path, name: str
) -> AsyncIterator[tuple[str, web.Application]]:
    table = build_table([ProfileReport.model_validate(r) for r in reports], Policy(), NOW)
    snapshot = tmp_path / f"{name}.json"
    snapshot.write_text(table.model_dump_json())
    values: dict[str, Any] = {
        "host": "127.0.0.1",
        "redis_url": "",
        "snapshot_path": snapshot,
        "scrape_interval_s": 0.0,
        "instance_id": f"hostile-{name}",
    }
    server = TestServer(create_app(DataPlaneSettings(**values), AppDeps()), host="127.0.0.1")
    await server.start_server()
    try:
        await server.app[COUNTER].settled()
        yield str(server.make_url("")).rstrip("/"), server.app
    finally:
        await server.close()


def _tools() -> list[dict[str, Any]]:
    """Tools unlike the profiler's probes: nested, with enums and long descriptions."""
    tools = []
    for i in range(24):
        properties = {
            f"field_{j}": {"type": "string", "enum": [f"v{k}" for k in range(6)]} for j in range(6)
        }
        tools.append(
            {
                "type": "function",
                "function": {
                    "name": f"update_record_{i}",
                    "description": f"Update record {i} of the ledger; every field is optional.",
                    "parameters": {"type": "object", "properties": properties},
                },
            }
        )
    return tools


async def _ratio(
    session: aiohttp.ClientSession, url: str, app: web.Application, body: dict[str, Any]
) -> float:
    """The engine's usage.prompt_tokens over the data plane's estimate for one request."""
    before = {q: metric(app, f"{RATIO}_sum", pair=f"{FAMILY}@{q}") for q in QUANTS}
    status, pair, raw = await post(session, url, body)
    assert status == 200, raw[:300]
    return metric(app, f"{RATIO}_sum", pair=pair) - before[pair.split("@")[1]]


async def _ratios(url: str, app: web.Application) -> Mapping[str, float]:
    ask = {"model": "auto", "max_tokens": 4}
    tools_heavy = ask | {
        "messages": [{"role": "user", "content": "Which record needs an update?"}],
        "tools": _tools(),
    }
    foreign = ask | {"messages": [{"role": "user", "content": NON_ENGLISH}]}
    assert min(len(json.dumps(b)) for b in (tools_heavy, foreign)) >= 8192  # counted
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        return {
            "tools": await _ratio(session, url, app, tools_heavy),
            "non-English": await _ratio(session, url, app, foreign),
        }


async def test_the_tokenizer_s_count_matches_the_engine_better_than_characters(
    tmp_path: Path,
) -> None:
    """The profiler finds the engines' tokenizer file through /v1/models and the table names
    it: usage.prompt_tokens over the estimate is within 2% of 1 for a tools-heavy and a
    non-English prompt. The same table without the file (today's characters per token,
    measured by the profiler on its prose and probe tools) is off by more on both: measured
    1.08 (tools) and 1.63 (non-English) against 0.9997 and 0.9999 with the file."""
    path = tiny_tokenizer.train(tmp_path / "ckpt" / "tokenizer.json")
    config = SimFleetConfig(pairs=[_engine(q, path) for q in QUANTS])
    async with run_fleet(config, answers={}) as fleet, aiohttp.ClientSession() as session:
        urls = {q: [fleet.url(_served(q))] for q in QUANTS}
        client = EngineClient(session, urls["fp8"][0], _served("fp8"), 10.0)
        info = await preflight(client, 5.0)
        assert info.tokenizer is not None
        assert info.tokenizer == TokenizerRef(
            id=str(path.resolve()), sha256=tiny_tokenizer.sha256(path)
        )
        rates = (_text_rate(path), await measure_json_chars_per_token(client))
        plain = [_report(q, u, rates) for q, u in urls.items()]
        named = [r | {"tokenizer": info.tokenizer.model_dump()} for r in plain]
        async with _data_plane(named, tmp_path, "named") as (url, app):
            counted = await _ratios(url, app)
        async with _data_plane(plain, tmp_path, "plain") as (url, app):
            estimated = await _ratios(url, app)
    for kind, ratio in counted.items():
        assert 0.98 <= ratio <= 1.02, (kind, counted)
        assert abs(estimated[kind] - 1) > abs(ratio - 1), (kind, counted, estimated)
    assert estimated["non-English"] > 1.5, estimated


def _turns() -> list[dict[str, str]]:
    """Many short turns: the template's markers are a large share of the prompt."""
    said = ("Is the ledger balanced for the third quarter?", "Yes, to the cent, twice checked.")
    return [{"role": ("user", "assistant")[i % 2], "content": said[i % 2]} for i in range(161)]


async def _template_ratios(url: str, app: web.Application) -> Mapping[str, float]:
    ask = {"model": "auto", "max_tokens": 4}
    bodies = {
        "turns": ask | {"messages": _turns()},
        "tools": ask | {"messages": _turns()[:9], "tools": _tools()},
    }
    assert min(len(json.dumps(b)) for b in bodies.values()) >= 8192  # counted
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        return {kind: await _ratio(session, url, app, body) for kind, body in bodies.items()}


async def test_the_chat_template_s_tokens_are_counted_and_the_ratio_shows_them(
    tmp_path: Path,
) -> None:
    """Engines whose chat template adds 5 tokens per prompt and 4 per turn and renders no
    tools (the shipped Gemma turn format's figures, docs/profiler.md "Chat template"): the
    profiler measures them, the table carries them, and `gearbox_prompt_estimate_ratio`
    (usage.prompt_tokens over the estimate) is within 2% of 1 for 161 short turns and for 9
    turns with 24 tools. The same table without the template (the count of c0edadc) is off on
    both, and the ratio shows it: measured 1.119 for the turns (the markers missing) and 0.033
    for the tools (their JSON counted, not rendered), against 1.000 and 0.996 with it."""
    path = tiny_tokenizer.train(tmp_path / "ckpt" / "tokenizer.json")
    gemma = {"template_tokens": (5, 4), "template_renders_tools": False}
    engines = [_engine(q, path).model_copy(update=gemma) for q in QUANTS]
    async with run_fleet(SimFleetConfig(pairs=engines), answers={}) as fleet:
        urls = {q: [fleet.url(_served(q))] for q in QUANTS}
        async with aiohttp.ClientSession() as session:
            client = EngineClient(session, urls["fp8"][0], _served("fp8"), 10.0)
            ref = await with_template(client, (await preflight(client, 5.0)).tokenizer)
        assert ref is not None
        assert ref.template is not None
        # measured against the data plane's count, whose texts are joined by a newline (one
        # token of this file) where these engines count each turn apart: 5 + 1 and 4 - 1
        assert (ref.template.fixed, ref.template.per_message) == (6.0, 3.0)
        assert (ref.template.tools_fixed, ref.template.tools_scale) == (0.0, 0.0)
        rates = (_text_rate(path), None)
        plain = [_report(q, u, rates) for q, u in urls.items()]
        measured = [r | {"tokenizer": ref.model_dump()} for r in plain]
        alone = [r | {"tokenizer": ref.model_dump(exclude={"template"})} for r in plain]
        async with _data_plane(measured, tmp_path, "template") as (url, app):
            counted = await _template_ratios(url, app)
        async with _data_plane(alone, tmp_path, "alone") as (url, app):
            text_alone = await _template_ratios(url, app)
    print(f"with the template {counted}, text alone {text_alone}")
    for kind, ratio in counted.items():
        assert 0.98 <= ratio <= 1.02, (kind, counted)
    assert text_alone["turns"] > 1.1, text_alone
    assert text_alone["tools"] < 0.2, text_alone


def _small_bodies() -> Mapping[str, dict[str, Any]]:
    """Chat bodies under TABLE_TOKENIZE_MIN_BYTES (priced per character): 60 short turns, and
    9 turns with 8 tools (5.2k characters of JSON)."""
    ask = {"model": "auto", "max_tokens": 4}
    bodies = {
        "turns": ask | {"messages": _turns()[:60]},
        "tools": ask | {"messages": _turns()[:9], "tools": _tools()[:8]},
    }
    assert max(len(json.dumps(b)) for b in bodies.values()) < 8192  # not counted
    return bodies


async def _small_ratios(url: str, app: web.Application) -> Mapping[str, float]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        return {k: await _ratio(session, url, app, b) for k, b in _small_bodies().items()}


async def test_a_small_body_priced_per_character_adds_the_template_too(tmp_path: Path) -> None:
    """Engines whose chat template adds 5 tokens per prompt and 4 per turn and renders no
    tools (Gemma's turn format), the template measured by the profiler and carried by the
    table: bodies under 8 KiB, priced per character, add the template's tokens and leave out
    the tools' JSON, so usage.prompt_tokens over the estimate is within 2% of 1 for 60 short
    turns and for 9 turns with 8 tools (not over-estimated: at least 0.98). The table's
    characters per token are the turns' own by the engines' tokenizer (the profiler's figure
    on text like them), so what is left is the template's part. The same table without the
    template (the estimate of d7f11db, with the template or without) is off on both:
    measured 1.167 for the turns (the markers missing) and 0.075 for the tools (their JSON
    counted, not rendered), against 1.000 and 1.000 with it."""
    path = tiny_tokenizer.train(tmp_path / "ckpt" / "tokenizer.json")
    gemma = {"template_tokens": (5, 4), "template_renders_tools": False}
    engines = [_engine(q, path).model_copy(update=gemma) for q in QUANTS]
    texts = [m["content"] for m in _turns()[:60]]
    rate = sum(map(len, texts)) / sum(tiny_tokenizer.count(path, t) for t in texts)
    async with run_fleet(SimFleetConfig(pairs=engines), answers={}) as fleet:
        urls = {q: [fleet.url(_served(q))] for q in QUANTS}
        async with aiohttp.ClientSession() as session:
            client = EngineClient(session, urls["fp8"][0], _served("fp8"), 10.0)
            ref = await with_template(client, (await preflight(client, 5.0)).tokenizer)
        assert ref is not None
        assert ref.template == TemplateTokens(fixed=6, per_message=3, tools_scale=0)
        plain = [_report(q, u, (rate, None)) for q, u in urls.items()]
        measured = [r | {"tokenizer": ref.model_dump()} for r in plain]
        alone = [r | {"tokenizer": ref.model_dump(exclude={"template"})} for r in plain]
        async with _data_plane(measured, tmp_path, "small-template") as (url, app):
            priced = await _small_ratios(url, app)
        async with _data_plane(alone, tmp_path, "small-alone") as (url, app):
            text_alone = await _small_ratios(url, app)
    print(f"with the template {priced}, text alone {text_alone}")
    for kind, ratio in priced.items():
        assert 0.98 <= ratio <= 1.02, (kind, priced)
    assert text_alone["turns"] > 1.1, text_alone
    assert text_alone["tools"] < 0.2, text_alone


def _completions() -> Mapping[str, dict[str, Any]]:
    """A completions prompt counted by the tokenizer (over TABLE_TOKENIZE_MIN_BYTES) and one
    priced per character: the engines' tokenizer splits this prose at exactly 5.0 characters
    per token, the table's figure, so what is left is the engine's BOS."""
    ask = {"model": "auto", "max_tokens": 4}
    bodies = {
        "counted": ask | {"prompt": tiny_tokenizer.PROSE * 40},
        "per character": ask | {"prompt": tiny_tokenizer.PROSE[:180]},
    }
    assert len(json.dumps(bodies["counted"])) >= 8192 > len(json.dumps(bodies["per character"]))
    return bodies


async def _completion_ratios(url: str, app: web.Application) -> Mapping[str, float]:
    ratios = {}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        for kind, body in _completions().items():
            before = {q: metric(app, f"{RATIO}_sum", pair=f"{FAMILY}@{q}") for q in QUANTS}
            async with session.post(f"{url}/v1/completions", json=body) as resp:
                assert resp.status == 200, (await resp.read())[:300]
                pair = resp.headers["X-Route-Pair"]
            ratios[kind] = metric(app, f"{RATIO}_sum", pair=pair) - before[pair.split("@")[1]]
    return ratios


async def test_a_completions_prompt_counts_the_bos_the_engine_adds(tmp_path: Path) -> None:
    """Engines that add one special token (a BOS, as vLLM's /v1/completions adds Gemma's by
    default) to each completions prompt: the profiler measures it from one completions
    request, the table carries it, and usage.prompt_tokens over the estimate is 1.000 for a
    prompt counted by the tokenizer and for one priced per character. The same table
    without it (the count of 7b80295) is one token short on both: measured 1.0005 and 1.028
    (37 / 36)."""
    path = tiny_tokenizer.train(tmp_path / "ckpt" / "tokenizer.json")
    gemma = {"template_tokens": (5, 4), "template_renders_tools": False, "special_tokens": 1}
    engines = [_engine(q, path).model_copy(update=gemma) for q in QUANTS]
    async with run_fleet(SimFleetConfig(pairs=engines), answers={}) as fleet:
        urls = {q: [fleet.url(_served(q))] for q in QUANTS}
        async with aiohttp.ClientSession() as session:
            client = EngineClient(session, urls["fp8"][0], _served("fp8"), 10.0)
            ref = await with_template(client, (await preflight(client, 5.0)).tokenizer)
        assert ref is not None
        assert ref.special_tokens == 1
        plain = [_report(q, u, (5.0, None)) for q, u in urls.items()]
        measured = [r | {"tokenizer": ref.model_dump()} for r in plain]
        alone = [r | {"tokenizer": ref.model_dump(exclude={"special_tokens"})} for r in plain]
        async with _data_plane(measured, tmp_path, "bos") as (url, app):
            counted = await _completion_ratios(url, app)
        async with _data_plane(alone, tmp_path, "no-bos") as (url, app):
            text_alone = await _completion_ratios(url, app)
    print(f"with the BOS {counted}, text alone {text_alone}")
    assert counted == {"counted": pytest.approx(1.0), "per character": pytest.approx(1.0)}
    assert text_alone["counted"] > 1.0001, text_alone
    assert text_alone["per character"] == pytest.approx(37 / 36), text_alone
