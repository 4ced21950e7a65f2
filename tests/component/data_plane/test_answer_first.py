"""A whole answer is written before the request's bookkeeping (docs/data_plane.md, "What happens
to a request", step 10): on the wire before accounting runs, out of the deadline's reach once
it is in hand, and still accounted when the client left while it was written."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from data_plane.serving.delivery import Delivery
from tests.component.data_plane.conftest import CHAT_BODY, MakeHarness
from tests.component.data_plane.fakes import ok_json, two_pair_table

FP16, INT4 = "http://fp16-a", "http://int4-a"


async def test_the_answer_is_on_the_wire_before_its_bookkeeping(
    make_harness: MakeHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Accounting peeks at the client's socket: on loopback a sent answer is already in the
    client's receive queue, head and body."""
    h = await make_harness(two_pair_table([FP16], [INT4]), routes={INT4: ok_json("cheap")})
    url = h.client.make_url("/")
    client = socket.create_connection((url.host, url.port), timeout=5)
    client.setblocking(False)
    seen: list[bytes] = []
    account = Delivery._account

    def peeking(self: Delivery, *args: Any) -> None:
        try:
            seen.append(client.recv(65536, socket.MSG_PEEK))
        except BlockingIOError:
            seen.append(b"")
        account(self, *args)

    monkeypatch.setattr(Delivery, "_account", peeking)
    body = json.dumps(CHAT_BODY).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {url.host}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    loop = asyncio.get_running_loop()
    with client:
        await loop.sock_sendall(client, head.encode() + body)
        answer = b""
        while chunk := await asyncio.wait_for(loop.sock_recv(client, 65536), timeout=10):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    assert len(seen) == 1, "one answer accounted"
    assert seen[0] == answer  # all of it was out when accounting began
    assert h.metric("gearbox_tokens_total", pair="fam@int4", kind="output") == 3


async def test_a_deadline_passing_while_the_answer_is_written_does_not_cut_it(
    make_harness: MakeHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The answer came well within the budget; writing it takes longer than what was left
    (a slow reader): the client still gets all of it, not a 504 after half of it."""
    h = await make_harness(two_pair_table([FP16], [INT4]), routes={INT4: ok_json("cheap")})
    write_eof = web.Response.write_eof

    async def slow_write_eof(self: web.Response, data: bytes = b"") -> None:
        await asyncio.sleep(0.6)  # past the 300 ms budget + 200 ms grace
        await write_eof(self, data)

    monkeypatch.setattr(web.Response, "write_eof", slow_write_eof)
    resp = await h.client.post(
        "/v1/chat/completions",
        data=json.dumps(CHAT_BODY),
        headers={"X-Latency-Budget-Ms": "300"},
    )
    assert resp.status == 200
    assert (await resp.json())["choices"][0]["message"]["content"] == "cheap"
    assert h.metric("gearbox_requests_total", route="chat_completions", outcome="ok") == 1


async def test_an_answer_whose_client_left_is_accounted_and_counted_cancelled(
    make_harness: MakeHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = await make_harness(two_pair_table([FP16], [INT4]), routes={INT4: ok_json("cheap")})

    async def reset(self: web.Response, data: bytes = b"") -> None:
        raise ConnectionResetError("the client went away")

    monkeypatch.setattr(web.Response, "write_eof", reset)
    with pytest.raises(aiohttp.ClientError):  # the answer was cut
        async with h.client.post("/v1/chat/completions", data=json.dumps(CHAT_BODY)) as resp:
            await resp.read()
    # the engine answered (7 prompt + 3 completion tokens): that work is costed
    assert h.metric("gearbox_tokens_total", pair="fam@int4", kind="output") == 3
    assert h.metric("gearbox_requests_total", route="chat_completions", outcome="cancelled") == 1
