"""Bad input never yields a 500: every case below is a 4xx OpenAI envelope naming the problem."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.component.data_plane.conftest import CHAT_BODY, MakeHarness
from tests.component.data_plane.fakes import ok_json, two_pair_table

FP16, INT4 = "http://fp16-a", "http://int4-a"
GOOD = json.dumps(CHAT_BODY).encode()

CASES: list[tuple[str, str, str, bytes, dict[str, str], int, str, str | None]] = [
    # id, method, path, body, headers, status, code, param
    ("malformed json", "POST", "/v1/chat/completions", b'{"model":', {}, 400, "invalid_json", None),
    ("not an object", "POST", "/v1/chat/completions", b"[1, 2]", {}, 400, "invalid_json", None),
    ("empty body", "POST", "/v1/chat/completions", b"", {}, 400, "invalid_json", None),
    (
        "invalid utf-8",
        "POST",
        "/v1/chat/completions",
        b'{"model": "auto", "messages": [{"role": "user", "content": "\xff\xfe"}]}',
        {},
        400,
        "invalid_json",
        None,
    ),
    (
        "messages not a list",
        "POST",
        "/v1/chat/completions",
        json.dumps({"model": "auto", "messages": "hi"}).encode(),
        {},
        400,
        "invalid_field",
        "messages",
    ),
    (
        "max_tokens wrong type",
        "POST",
        "/v1/chat/completions",
        json.dumps({**CHAT_BODY, "max_tokens": "many"}).encode(),
        {},
        400,
        "invalid_field",
        "max_tokens",
    ),
    (
        "stream wrong type",
        "POST",
        "/v1/chat/completions",
        json.dumps({**CHAT_BODY, "stream": "yes"}).encode(),
        {},
        400,
        "invalid_field",
        "stream",
    ),
    (
        "model missing",
        "POST",
        "/v1/completions",
        json.dumps({"prompt": "hi"}).encode(),
        {},
        400,
        "invalid_field",
        "model",
    ),
    (
        "unknown model",
        "POST",
        "/v1/chat/completions",
        json.dumps({**CHAT_BODY, "model": "nope"}).encode(),
        {},
        404,
        "model_not_found",
        "model",
    ),
    (
        "latency header not a number",
        "POST",
        "/v1/chat/completions",
        GOOD,
        {"X-Latency-Budget-Ms": "fast"},
        400,
        "invalid_budget",
        "X-Latency-Budget-Ms",
    ),
    (
        "accuracy out of range",
        "POST",
        "/v1/chat/completions",
        GOOD,
        {"X-Min-Accuracy": "95"},
        400,
        "invalid_budget",
        "X-Min-Accuracy",
    ),
    (
        "unknown budget mode",
        "POST",
        "/v1/chat/completions",
        GOOD,
        {"X-Budget-Mode": "lenient"},
        400,
        "invalid_budget",
        "X-Budget-Mode",
    ),
    (
        "strict budget nobody meets",
        "POST",
        "/v1/chat/completions",
        GOOD,
        {"X-Budget-Mode": "strict", "X-Latency-Budget-Ms": "1"},
        400,
        "budget_infeasible",
        "X-Latency-Budget-Ms",
    ),
    (
        "oversize body",
        "POST",
        "/v1/chat/completions",
        b"x" * 8192,
        {},
        413,
        "payload_too_large",
        None,
    ),
    ("wrong method", "GET", "/v1/chat/completions", b"", {}, 405, "method_not_allowed", None),
    ("unknown path", "GET", "/v2/everything", b"", {}, 404, "not_found", None),
    ("route: malformed json", "POST", "/v1/route", b"{", {}, 400, "invalid_json", None),
    (
        # Deeper than the JSON decoder's recursion limit: refused before any decoder runs
        # (was a 500: /v1/route decoded the body once more to pick its kind).
        "route: nesting past the depth limit",
        "POST",
        "/v1/route",
        b'{"model": "auto", "prompt": ' + b"[" * 1500 + b"]" * 1500 + b"}",
        {},
        400,
        "invalid_json",
        None,
    ),
    (
        "route: bad header",
        "POST",
        "/v1/route",
        GOOD,
        {"X-TTFT-Budget-Ms": "-5"},
        400,
        "invalid_budget",
        "X-TTFT-Budget-Ms",
    ),
]


@pytest.mark.parametrize(
    ("method", "path", "body", "headers", "status", "code", "param"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
async def test_bad_input_gets_a_4xx_envelope(
    make_harness: MakeHarness,
    method: str,
    path: str,
    body: bytes,
    headers: dict[str, str],
    status: int,
    code: str,
    param: str | None,
) -> None:
    h = await make_harness(
        two_pair_table([FP16], [INT4]), routes={INT4: ok_json()}, max_body_bytes=4096
    )
    resp = await h.client.request(method, path, data=body, headers=headers)
    assert resp.status == status
    payload = await resp.json()
    assert set(payload) == {"error"}
    error = payload["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == code
    assert error["type"] == "invalid_request_error"
    assert isinstance(error["message"], str)
    assert error["message"]
    if param is not None:
        assert error["param"] == param
    assert resp.headers["X-Request-Id"]
    assert h.upstream.requests == []
    assert (
        h.metric("gearbox_requests_total", route="chat_completions", outcome="internal_error") == 0
    )


async def test_a_bug_is_a_generic_500_logged_once(
    make_harness: MakeHarness, caplog: pytest.LogCaptureFixture
) -> None:
    def explode(_: object) -> object:
        raise ZeroDivisionError("secret detail")

    h = await make_harness(two_pair_table([FP16], [INT4]), routes={INT4: explode})
    resp = await h.client.post("/v1/chat/completions", data=GOOD)
    assert resp.status == 500
    error = (await resp.json())["error"]
    assert error == {
        "message": "internal error",
        "type": "server_error",
        "param": None,
        "code": "internal_error",
    }
    logged = [r for r in caplog.records if r.exc_info]
    assert len(logged) == 1
    assert (
        h.metric("gearbox_requests_total", route="chat_completions", outcome="internal_error") == 1
    )


async def test_a_body_that_stops_arriving_is_a_408_and_a_late_large_one_is_read(
    make_harness: MakeHarness,
) -> None:
    """A body that is not all there with the head is read under `body_read_timeout_s`: one
    that stalls is a 408 (connection closed); one that arrives in pieces is served."""
    h = await make_harness(
        two_pair_table([FP16], [INT4]), routes={INT4: ok_json()}, body_read_timeout_s=0.3
    )
    server = h.client.server
    reader, writer = await asyncio.open_connection(server.host, server.port)
    body = json.dumps(CHAT_BODY).encode()
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    writer.write(head + body[:10])  # and then nothing
    await writer.drain()
    answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=5)
    answer += await asyncio.wait_for(reader.read(145), timeout=5)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert b"\r\nConnection: close\r\n" in answer
    assert b'"request_timeout"' in answer

    reader, writer = await asyncio.open_connection(server.host, server.port)
    writer.write(head + body[:10])
    await writer.drain()
    await asyncio.sleep(0.1)  # the handler is waiting for the rest
    writer.write(body[10:])
    await writer.drain()
    answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=5)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 200 ")
