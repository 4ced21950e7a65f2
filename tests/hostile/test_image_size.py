"""Image parts sized at the model's own tokens per image (docs/data_plane.md, "Prompt size"):
the profiler measures the figure from the engine's usage, the table carries it, and the one
estimate uses it, so a client's screenshots are the long prompt they are.

Simulated engines that prefill exactly as the shipped 70B profiles say (examples/profiles:
awq-int4 0.17 ms and fp8 0.15 ms per input token, 4.1 characters per token, context 32,768),
counting each image part as their configured `image_tokens`, behind a data plane from
`create_app` (static mode, the table the control plane builds from those reports).
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
from profiler.engine.client import EngineClient
from profiler.engine.image_probe import IMAGE_PART
from profiler.engine.token_rates import measure_image_tokens
from simulator import Fleet, SimFleetConfig, SimPairConfig, run_fleet
from tests.hostile.test_engine_blame import blamed, opened, post
from tests.reliability.stack import EXAMPLES, NOW, metric
from tests.support.virtual_time import on_virtual_time
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

FAMILY = "llama-3.1-70b-instruct"
QUANTS = ("awq-int4", "fp8")
PRICE_USD_PER_MTOK = {"awq-int4": 0.3, "fp8": 0.6}
CHARS_PER_TOKEN = 4.1  # the profiles'
RATIO = "gearbox_prompt_estimate_ratio"


def _pair(quant: str) -> str:
    return f"{FAMILY}@{quant}"


def _served(quant: str) -> str:
    return f"sim/{FAMILY}-{quant}"


def _report(quant: str, urls: Sequence[str], image_tokens: int | None) -> ProfileReport:
    """The shipped report, served by `urls`, with the tokens per image the profiler measured
    (None: not measured, as in every report before the measurement)."""
    data = json.loads((EXAMPLES / f"{FAMILY}@{quant}.json").read_text(encoding="utf-8"))
    price = PRICE_USD_PER_MTOK[quant]
    data |= {
        "endpoints": list(urls),
        "served_model_name": _served(quant),
        "prices": {"input_usd_per_mtok": price, "output_usd_per_mtok": 2 * price},
        "image_tokens": image_tokens,
    }
    return ProfileReport.model_validate(data)


def _as_profiled(quant: str, image_tokens: int, max_running: int = 64) -> SimPairConfig:
    """The engine as its report says (TTFT line and TPOT), counting `image_tokens` per image."""
    table = build_table([_report(quant, ["http://127.0.0.1:1"], None)], Policy(), NOW)
    line = table.entries[0].latency
    return SimPairConfig(
        name=_served(quant),
        family=FAMILY,
        quantization=quant,
        ttft_base_s=line.ttft_base_s,
        ttft_per_input_token_s=line.ttft_per_input_token_s,
        tpot_base_s=line.tpot_base_s,
        max_running=max_running,
        context_length=32_768,
        chars_per_token=CHARS_PER_TOKEN,
        image_tokens=image_tokens,
    )


@asynccontextmanager
async def _data_plane(
    fleet: Fleet, tmp_path: Path, image_tokens: int | None
) -> AsyncIterator[tuple[str, web.Application]]:
    """A data plane in static mode on the table built from the reports of both pairs, served
    by `fleet`, carrying `image_tokens`."""
    urls: Mapping[str, Sequence[str]] = {q: [fleet.url(_served(q))] for q in QUANTS}
    reports = [_report(q, u, image_tokens) for q, u in urls.items()]
    table = build_table(reports, Policy(), NOW)
    assert {e.image_tokens for e in table.entries} == {image_tokens}
    snapshot = tmp_path / "table.json"
    snapshot.write_text(table.model_dump_json())
    values: dict[str, Any] = {
        "host": "127.0.0.1",
        "redis_url": "",
        "snapshot_path": snapshot,
        "scrape_interval_s": 0.0,
        "breaker_consecutive_failures": 3,
        "instance_id": "hostile-images",
    }
    server = TestServer(
        create_app(DataPlaneSettings(**values), AppDeps(clock=asyncio.get_running_loop().time)),
        host="127.0.0.1",
    )
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/"), server.app
    finally:
        await server.close()


def _with_images(model: str, images: int, **fields: Any) -> dict[str, Any]:
    content = [{"type": "text", "text": "What changed between these screens?"}]
    return {
        "model": model,
        "messages": [{"role": "user", "content": [*content, *[IMAGE_PART] * images]}],
        "max_tokens": 8,
        **fields,
    }


async def _estimate_ratio(fleet: Fleet, tmp_path: Path, image_tokens: int | None) -> float:
    """usage.prompt_tokens over the router's estimate for one two-image request, behind a
    data plane whose table carries `image_tokens`."""
    async with (
        _data_plane(fleet, tmp_path, image_tokens) as (url, app),
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session,
    ):
        status, pair, raw = await post(session, url, _with_images("auto", 2))
        assert status == 200, raw[:300]
        return metric(app, f"{RATIO}_sum", pair=pair) / metric(app, f"{RATIO}_count", pair=pair)


@on_virtual_time
async def test_a_measured_tokens_per_image_brings_the_estimate_to_the_engine_s_count(
    tmp_path: Path,
) -> None:
    """Engines that count an image part as 1,500 tokens: the profiler's probe reads 1,500
    from the engine's usage, the table built from reports carrying it keeps it, and a
    two-image request (about 3,000 tokens of images) is estimated within 2% of the engine's
    count, against 2.6x under it with the default 576 per image (what 260b93e does with any
    profile)."""
    config = SimFleetConfig(pairs=[_as_profiled(q, image_tokens=1_500) for q in QUANTS])
    async with run_fleet(config, answers={}) as fleet:
        async with aiohttp.ClientSession() as session:
            engine = EngineClient(session, fleet.url(_served(QUANTS[0])), _served(QUANTS[0]), 10)
            measured = await measure_image_tokens(engine)
        assert measured == 1_500
        before = await _estimate_ratio(fleet, tmp_path, None)
        after = await _estimate_ratio(fleet, tmp_path, measured)
    assert after == pytest.approx(1.0, abs=0.02)  # 2.66 on 260b93e
    assert before == pytest.approx(3_009 / 1_161, rel=0.02)  # 9 + 2 x 1,500 over 9 + 2 x 576


def _ordinary() -> dict[str, Any]:
    return {
        "model": "auto",
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": 8,
        "stream": True,
    }


@on_virtual_time
async def test_a_client_s_screenshots_are_prefilled_not_taken_for_a_hang(tmp_path: Path) -> None:
    """One client sends six screenshots in one streamed request to engines counting 2,880
    tokens per image (LLaVA-NeXT's largest): 17,280 tokens, a 3 s prefill on awq-int4 as
    profiled, on an engine that runs one request at a time, while other clients' ordinary
    streams queue behind it, one every 0.4 s. Sized at 576 per image (260b93e) the request
    was predicted at 3,400 tokens: its first byte was allowed 2 s, the neighbours' overdue
    silence stalled the endpoint before the prefill was done, and the request and five
    neighbours were ended as the engine's lack of progress (6 attempts blamed on awq-int4)
    and sent again to fp8. Sized at the table's 2,880 it is allowed three times its real
    prefill: answered where it was sent, nothing blamed or sent again, no breaker opened,
    and every neighbour answered."""
    one_slot = _as_profiled("awq-int4", image_tokens=2_880, max_running=1)
    config = SimFleetConfig(pairs=[one_slot, _as_profiled("fp8", image_tokens=2_880)])
    async with (
        run_fleet(config, answers={}) as fleet,
        _data_plane(fleet, tmp_path, 2_880) as (url, app),
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session,
    ):
        screens = _with_images("auto", 6, stream=True)
        big = asyncio.create_task(post(session, url, screens))
        await eventually(lambda: fleet.stats(_served("awq-int4")).received >= 1)
        neighbours = []
        for _ in range(8):
            neighbours.append(asyncio.create_task(post(session, url, _ordinary())))
            await asyncio.sleep(0.4)  # the clients' pace, not a wait for an event
        status, pair, raw = await big
        assert status == 200, raw[:300]
        assert b"[DONE]" in raw
        for n_status, _, n_raw in await asyncio.gather(*neighbours):
            assert n_status == 200, n_raw[:300]
        assert pair == _pair("awq-int4")
        assert fleet.stats(_served("fp8")).received == 0  # nothing was sent again
        for quant in QUANTS:
            assert opened(app, f"{_pair(quant)}#0") == 0
            assert blamed(app, f"{_pair(quant)}#0") == 0
