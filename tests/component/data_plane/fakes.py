"""Test doubles for the data plane: routing tables as plain data and a function-backed
FakeUpstream implementing the UpstreamClient port (like httpx's MockTransport)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from contracts.routing_table import RoutingTable, stamp_table, with_version
from data_plane.outcome import ConnectFailed, StreamBroken
from data_plane.upstream.port import (
    AttemptError,
    LimitedResponse,
    UpstreamRequest,
    UpstreamResponse,
    limit_until,
    within,
)
from tests.support.routing_tables import entry, table


def pair_entry(
    family: str,
    quant: str,
    *,
    urls: Sequence[str] = (),
    accuracy: float = 0.8,
    usd_per_mtok: float = 1.0,
    precision_rank: int = 0,
    ttft_base_s: float = 0.05,
    tpot_base_s: float = 0.001,
    context_length: int = 8192,
    served_model_name: str | None = None,
) -> dict[str, Any]:
    """One table entry with flat latency (no load or prompt terms) and output at twice the
    input price; one unroutable endpoint unless `urls` are given."""
    return entry(
        family,
        quant,
        urls=urls or (f"http://10.255.0.1:9/{family}-{quant}",),
        served_model_name=served_model_name,
        context_length=context_length,
        input_usd_per_mtok=usd_per_mtok,
        output_usd_per_mtok=usd_per_mtok * 2,
        ttft_base_s=ttft_base_s,
        ttft_per_input_token_s=0.0,
        ttft_per_load_s=0.0,
        tpot_base_s=tpot_base_s,
        tpot_per_load_s=0.0,
        accuracy=accuracy,
        precision_rank=precision_rank,
    )


def make_table(
    entries: list[dict[str, Any]],
    *,
    policy: dict[str, Any] | None = None,
    version: int = 1,
    fleet_baseline: str | None = None,
) -> RoutingTable:
    """A stamped, versioned table; entries sorted into cost order."""
    made = table(
        entries, policy=policy, created_at="2026-01-01T00:00:00Z", fleet_baseline=fleet_baseline
    )
    return with_version(made, version)


def two_pair_table(
    fp16_urls: Sequence[str] = (), int4_urls: Sequence[str] = (), **kw: Any
) -> RoutingTable:
    """`fam@fp16` (accurate, 4x the price) and `fam@int4` (cheap, accuracy 0.6)."""
    return make_table(
        [
            pair_entry("fam", "fp16", urls=fp16_urls, accuracy=0.9, usd_per_mtok=4.0),
            pair_entry("fam", "int4", urls=int4_urls, accuracy=0.6, precision_rank=1),
        ],
        **kw,
    )


def demoted_table(policy: dict[str, Any] | None = None) -> RoutingTable:
    """`two_pair_table` (accuracy checks on, every answer sampled) with `fam@int4` demoted in
    math from 0.6 to 0.3: below a 0.5 floor, such requests all go to fp16."""
    data = two_pair_table(
        ["http://fp16-a"],
        ["http://int4-a"],
        policy=policy or {"accuracy_check": {"sample_rate": 1.0}},
    ).model_dump(mode="python")
    int4 = next(e for e in data["entries"] if e["pair"] == "fam@int4")
    int4["accuracy"]["math"] = 0.3
    data["demotions"] = {
        "fam@int4": {
            "math": {
                "profile_accuracy": 0.6,
                "profile_bound": None,
                "checks": 100,
                "agreed": 30,
                "base_version": 1,
            }
        }
    }
    return with_version(stamp_table(data), 2)


def chat_json(content: str = "hello", prompt_tokens: int = 7, completion_tokens: int = 3) -> bytes:
    return json.dumps(
        {
            "id": "cmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": "served",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
    ).encode()


def sse_chunks(words: Sequence[str], usage: bool = True) -> list[bytes]:
    """An OpenAI chat stream: one chunk per word, an optional usage chunk, then [DONE]."""
    out = []
    for w in words:
        chunk = {
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {"content": w}}],
        }
        out.append(b"data: " + json.dumps(chunk).encode() + b"\n\n")
    if usage:
        tail = {
            "object": "chat.completion.chunk",
            "choices": [],
            "usage": {"prompt_tokens": 5, "completion_tokens": len(words)},
        }
        out.append(b"data: " + json.dumps(tail).encode() + b"\n\n")
    out.append(b"data: [DONE]\n\n")
    return out


@dataclass
class FakeResponse:
    """A scripted engine answer; `delays_s[i]` is slept before chunk i; `break_after` raises
    StreamBroken after that many chunks; `hang` never produces a byte; `gate`, when given, is
    waited for before the first byte (a hold the test ends, not a wall-clock window)."""

    status: int = 200
    body: bytes = b""
    chunks: list[bytes] = field(default_factory=list)
    content_type: str = "application/json"
    delays_s: dict[int, float] = field(default_factory=dict)
    break_after: int | None = None
    closed: bool = False
    consumed: int = 0
    gate: asyncio.Event | None = None

    async def read(self) -> bytes:
        if self.gate is not None:
            await self.gate.wait()
        await asyncio.sleep(self.delays_s.get(0, 0.0))
        return self.body

    async def chunks_gen(self) -> AsyncGenerator[bytes, None]:
        if self.gate is not None:
            await self.gate.wait()
        for i, chunk in enumerate(self.chunks):
            if self.break_after is not None and i >= self.break_after:
                raise AttemptError(StreamBroken(), "scripted break")
            await asyncio.sleep(self.delays_s.get(i, 0.0))
            self.consumed += 1
            yield chunk

    def close(self) -> None:
        self.closed = True


class _Adapter:
    """Presents a FakeResponse through the UpstreamResponse protocol."""

    def __init__(self, fake: FakeResponse) -> None:
        self.fake = fake

    @property
    def status(self) -> int:
        return self.fake.status

    @property
    def content_type(self) -> str:
        return self.fake.content_type

    async def read(self) -> bytes:
        return await self.fake.read()

    def chunks(self) -> AsyncGenerator[bytes, None]:
        return self.fake.chunks_gen()

    def close(self) -> None:
        self.fake.close()


Responder = Callable[[UpstreamRequest], Awaitable[FakeResponse]]


class FakeUpstream:
    """UpstreamClient backed by a function; records every request and response."""

    def __init__(self, responder: Responder) -> None:
        self.responder = responder
        self.requests: list[UpstreamRequest] = []
        self.responses: list[FakeResponse] = []

    async def send(self, request: UpstreamRequest) -> UpstreamResponse:
        """Keeps the port's contract for `limit_s` as the aiohttp adapter does."""
        self.requests.append(request)
        until = limit_until(request.limit_s)
        fake = await within(until, self.responder(request))
        self.responses.append(fake)
        return _Adapter(fake) if until is None else LimitedResponse(_Adapter(fake), until)

    def hosts(self) -> list[str]:
        """The endpoint base URL of each request, in order."""
        return [r.url.rsplit("/v1/", 1)[0] for r in self.requests]


def by_url(routes: dict[str, Callable[[UpstreamRequest], FakeResponse]]) -> Responder:
    """A responder dispatching on the endpoint base URL; unknown URLs refuse to connect."""

    async def respond(request: UpstreamRequest) -> FakeResponse:
        base = request.url.rsplit("/v1/", 1)[0]
        make = routes.get(base)
        if make is None:
            raise AttemptError(ConnectFailed(), "refused")
        return make(request)

    return respond


def refuse(_: UpstreamRequest) -> FakeResponse:
    raise AttemptError(ConnectFailed(), "refused")


def ok_json(content: str = "hello") -> Callable[[UpstreamRequest], FakeResponse]:
    return lambda _req: FakeResponse(body=chat_json(content))


def status(
    code: int, body: bytes = b'{"error": {"message": "engine says no"}}'
) -> Callable[[UpstreamRequest], FakeResponse]:
    return lambda _req: FakeResponse(status=code, body=body)
