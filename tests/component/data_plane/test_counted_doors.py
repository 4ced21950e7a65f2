"""Every door sizes a large prompt by the tokenizer the table names (docs/data_plane.md,
"Prompt size"): the HTTP door's completions, `/v1/route`, and gateway mode's ext_proc, through
the one `PromptCounter`.

A tools-heavy body whose count by a real tokenizer file (tests/support/tiny_tokenizer.py,
which splits text it never saw into bytes, as a served model splits a language it saw little
of) is about 3x its characters-per-token estimate (the pairs' 4.0 characters per token): the
cheap pair's context holds the estimate, not the count, so the count changes the decision.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import grpc
import pytest

from contracts.prompt_text import prompt_text
from contracts.routing_table import RoutingTable
from contracts.tokenizer_ref import file_sha256
from data_plane.app import COUNTER
from data_plane.decision.compile import compile_table
from data_plane.gateway.router import gateway_router
from data_plane.gateway.service import ExternalProcessor, ServiceConfig, start_server
from data_plane.prompt_counter import prompt_counter
from data_plane.table_store import TableStore
from data_plane.telemetry.metrics import DataPlaneMetrics
from tests.component.data_plane.conftest import MakeHarness
from tests.component.data_plane.fakes import make_table, pair_entry
from tests.component.data_plane.test_gateway_extproc import (
    BUFFERED,
    body_message,
    headers_message,
    set_headers,
)
from tests.support import tiny_tokenizer
from tests.support.extproc_client import ExternalProcessorStub

CHEAP_CONTEXT = 4096  # holds the estimate, not the count
JAPANESE = "在庫の記録をキーで探し、そのフィールドを返します。"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": f"lookup_{i}",
            "description": JAPANESE * 8,
            "parameters": {"type": "object", "properties": {"key": {"type": "string"}}},
        },
    }
    for i in range(12)
]
BODY = {
    "model": "fam",
    "messages": [{"role": "user", "content": "Which record should I look up?"}],
    "tools": TOOLS,
    "max_tokens": 16,
}
RAW = json.dumps(BODY).encode()


@pytest.fixture
def trained(tmp_path: Path) -> Path:
    return tiny_tokenizer.train(tmp_path / "model" / "tokenizer.json")


def _named(path: Path) -> RoutingTable:
    """`fam@int4` (cheap, a 2,048-token context) and `fam@fp16` (4x the price, 32k), both
    naming the tokenizer file at `path`."""
    rows = [
        pair_entry("fam", "fp16", usd_per_mtok=4.0, context_length=32_768),
        pair_entry("fam", "int4", precision_rank=1, context_length=CHEAP_CONTEXT),
    ]
    for row in rows:
        row["tokenizer"] = {"id": str(path), "sha256": file_sha256(path)}
    return make_table(rows)


def _sizes(path: Path) -> tuple[int, int]:
    """(the body's tokens by the file, its characters-per-token estimate at 4.0: a
    non-ASCII character counts its UTF-8 bytes, `prompt_size.rendered_chars`)."""
    text = prompt_text(BODY)
    return tiny_tokenizer.count(path, text), math.ceil(len(text.encode()) / 4.0)


def test_the_body_s_count_and_estimate_straddle_the_cheap_context(trained: Path) -> None:
    counted, estimated = _sizes(trained)
    assert len(RAW) >= 8192  # counted by the tokenizer (TABLE_TOKENIZE_MIN_BYTES' default)
    assert estimated + 16 < CHEAP_CONTEXT < counted, (counted, estimated)


async def test_v1_route_reports_the_tokenizer_s_count(
    make_harness: MakeHarness, trained: Path
) -> None:
    """On the code before (`/v1/route` did not count), the cheap pair was chosen, its context
    too small for the prompt, and the input tokens were the estimate's."""
    h = await make_harness(_named(trained))
    await h.app[COUNTER].settled()
    resp = await h.client.post("/v1/route", data=RAW)
    assert resp.status == 200, await resp.text()
    explained: dict[str, Any] = await resp.json()
    counted, _ = _sizes(trained)
    assert explained["pair"] == "fam@fp16", explained
    assert explained["tokens"]["input"] == counted


async def test_the_gateway_routes_by_the_tokenizer_s_count(trained: Path) -> None:
    """On the code before (the gateway did not count), the request went to fam@int4, whose
    context is too small for it."""
    store, metrics = TableStore(), DataPlaneMetrics("test", "test")
    table = compile_table(_named(trained))
    store.swap(table)
    counter = prompt_counter(store, None, 8192)
    counter.want(table)
    await counter.settled()
    router = gateway_router(store, metrics, random.Random(7), "x-gearbox-pair", counter=counter)
    processor = ExternalProcessor(router, metrics, ServiceConfig(BUFFERED, 1 << 20))
    server, port = await start_server(processor, "127.0.0.1", 0)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            # Envoy keeps its side open while the body's answer is owed (a half-close is a
            # client gone: `service._Reader`).
            call = ExternalProcessorStub(channel).Process()
            await call.write(headers_message({}, mode=BUFFERED))
            assert (await call.read()).WhichOneof("response") == "request_headers"
            await call.write(body_message(RAW, True))
            answer = await call.read()
            await call.done_writing()
    finally:
        await server.stop(None)
        await counter.close()
    assert answer.WhichOneof("response") == "request_body", answer
    headers = set_headers(answer.request_body.response)
    assert headers["x-gearbox-pair"] == "fam@fp16", headers
