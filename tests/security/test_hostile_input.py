"""Hostile bytes against `python -m data_plane serve`: bodies over the limit, deep or broken
JSON, invalid UTF-8, huge and numerous headers, and fuzzed header values. Every answer is a
4xx in the OpenAI envelope (or aiohttp's own 400 for bytes that are not HTTP), fast, with
bounded memory, and the process keeps serving everyone else."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.security.target import Target, parse_answer, raw_exchange, running_target

pytestmark = pytest.mark.integration

MAX_BODY_BYTES = 1024 * 1024
CHAT = b"/v1/chat/completions"
GOOD_BODY = json.dumps(
    {"model": "auto", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
).encode()
BUDGET_HEADERS = (
    "X-Latency-Budget-Ms",
    "X-TTFT-Budget-Ms",
    "X-Min-Accuracy",
    "X-Max-Cost-Usd",
    "X-Budget-Mode",
    "X-Task-Category",
)


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    workdir = tmp_path_factory.mktemp("hostile")
    with running_target(workdir, server_max_body_bytes=str(MAX_BODY_BYTES)) as running:
        yield running


def http_request(
    body: bytes,
    headers: Sequence[tuple[bytes, bytes]] = (),
    path: bytes = CHAT,
    length: int | None = None,
) -> bytes:
    lines = [b"POST " + path + b" HTTP/1.1", b"Host: gearbox.test", b"Connection: close"]
    lines += [b"Content-Type: application/json"]
    lines += [b"Content-Length: " + str(len(body) if length is None else length).encode()]
    lines += [name + b": " + value for name, value in headers]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def envelope(body: bytes) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(body)
    assert set(doc) == {"error"}, doc
    error: dict[str, Any] = doc["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert isinstance(error["message"], str)
    return error


def still_serving(target: Target) -> None:
    status, _, body = parse_answer(raw_exchange(target, http_request(GOOD_BODY)))
    assert status == 200, body


def test_oversized_bodies_are_refused_early_with_bounded_memory(target: Target) -> None:
    declared = 64 * 1024 * 1024  # never sent in full: the server must stop reading first
    payload = b'{"model":"auto","messages":[{"role":"user","content":"' + b"x" * (8 * 1024 * 1024)
    request = http_request(payload, length=declared)
    rss_before = target.rss_bytes()

    def one(_: int) -> tuple[int, bytes, float]:
        started = time.monotonic()
        status, _headers, body = parse_answer(raw_exchange(target, request, timeout_s=20))
        return status, body, time.monotonic() - started

    with ThreadPoolExecutor(max_workers=16) as pool:
        answers = list(pool.map(one, range(16)))
    growth = target.rss_bytes() - rss_before
    for status, body, elapsed_s in answers:
        assert status == 413, body
        assert envelope(body)["code"] == "payload_too_large"
        assert elapsed_s < 15
    # Buffering what the clients sent (16 x 8 MiB) would add 128 MiB; the limit is 1 MiB.
    assert growth < 64 * 1024 * 1024, f"RSS grew by {growth / 2**20:.0f} MiB"
    still_serving(target)


def test_chunked_body_over_the_limit_is_refused(target: Target) -> None:
    chunk = b"x" * 65536
    chunks = b"".join(b"%x\r\n" % len(chunk) + chunk + b"\r\n" for _ in range(40)) + b"0\r\n\r\n"
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\nConnection: close\r\n"
    head += b"Transfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n"
    status, _, body = parse_answer(raw_exchange(target, head + chunks))
    assert status == 413, body
    assert envelope(body)["code"] == "payload_too_large"


MALFORMED = {
    "deep arrays": b"[" * 200_000 + b"]" * 200_000,
    "deep objects": b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
    "deep messages": b'{"model":"auto","messages":' + b"[" * 50_000 + b"]" * 50_000 + b"}",
    "invalid utf-8": b'{"model":"auto","messages":[{"role":"user","content":"\xff\xfe\xc3"}]}',
    "overlong utf-8": b'{"model":"auto","messages":[{"role":"user","content":"\xc0\xaf"}]}',
    "truncated": GOOD_BODY[:-7],
    "empty": b"",
    "not an object": b'["model", "auto"]',
    "NaN tokens": GOOD_BODY.replace(b'"max_tokens": 4', b'"max_tokens": NaN'),
    "huge tokens": GOOD_BODY.replace(b'"max_tokens": 4', b'"max_tokens": 1' + b"0" * 5000),
    "messages not a list": b'{"model":"auto","messages":"hi"}',
    "model not a string": b'{"model":{"url":"http://x"},"messages":[]}',
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_bodies_get_a_400_envelope_fast(target: Target, name: str) -> None:
    started = time.monotonic()
    status, _, body = parse_answer(raw_exchange(target, http_request(MALFORMED[name])))
    assert time.monotonic() - started < 5
    assert status == 400, body
    assert envelope(body)["type"] == "invalid_request_error"


def test_huge_and_too_many_headers_are_refused_and_others_still_served(target: Target) -> None:
    cases = {
        "one 64 KiB value": [(b"X-Latency-Budget-Ms", b"1" * 65536)],
        "one 64 KiB name": [(b"X-" + b"a" * 65536, b"1")],
        "300 headers": [(b"X-Pad-%d" % i, b"v") for i in range(300)],
        "1 MiB in 8 KiB values": [(b"X-Pad-%d" % i, b"v" * 8000) for i in range(128)],
    }
    for name, headers in cases.items():
        started = time.monotonic()
        answer = raw_exchange(target, http_request(GOOD_BODY, headers))
        assert time.monotonic() - started < 5, name
        status, _, body = parse_answer(answer)
        # Refused by aiohttp's parser before the app runs (plain text, not the envelope).
        assert status in (400, 431), (name, status, body[:200])
        assert not any(e.encode() in body for e in target.engines)
    still_serving(target)


SLOW_CLIENT_LIMIT_S = 15.0
SLOW_CLIENTS = {
    "idle, never sends a byte": (b"", b""),
    "headers one byte at a time": (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\n",
        b"X-Pad: aaaa",
    ),
    "body one byte at a time": (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\nContent-Length: 100000\r\n\r\n{",
        b" ",
    ),
}


def hold_open(target: Target, first: bytes, drip: bytes) -> float | None:
    """Send `first`, then one byte of `drip` every 0.5 s without ever completing the request;
    the seconds until the server closed the connection, or None if it never did."""
    with socket.create_connection((target.host, target.port), 5) as sock:
        sock.settimeout(0.5)
        sock.sendall(first)
        started, sent = time.monotonic(), 0
        while (elapsed := time.monotonic() - started) < SLOW_CLIENT_LIMIT_S:
            try:
                if sock.recv(4096) == b"":
                    return elapsed
            except TimeoutError:
                pass
            except OSError:
                return elapsed
            if drip:
                try:
                    sock.sendall(drip[sent % len(drip) :][:1])
                except OSError:
                    return elapsed
                sent += 1
    return None


def test_slow_clients_are_cut_off_and_do_not_block_others(target: Target) -> None:
    """Slowloris: connections that never complete a request must not be held forever (each
    one is a file descriptor and a buffer), and must not delay anyone else meanwhile."""
    closed_after: dict[str, float | None] = {}

    def run(name: str) -> None:
        closed_after[name] = hold_open(target, *SLOW_CLIENTS[name])

    threads = [threading.Thread(target=run, args=(n,)) for n in SLOW_CLIENTS]
    for thread in threads:
        thread.start()
    for _ in range(10):
        started = time.monotonic()
        still_serving(target)
        assert time.monotonic() - started < 5
    for thread in threads:
        thread.join()
    never_closed = [n for n, t in closed_after.items() if t is None]
    assert not never_closed, (
        f"the data plane held these connections open for {SLOW_CLIENT_LIMIT_S:g} s without a "
        f"complete request: {never_closed}"
    )


FIELD_VALUE = st.text(
    alphabet=st.characters(min_codepoint=0x20, max_codepoint=0xFF, blacklist_characters="\x7f"),
    max_size=300,
).map(str.strip)
RAW_BYTES = st.binary(min_size=1, max_size=64).filter(lambda b: b"\r" not in b and b"\n" not in b)


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(name=st.sampled_from([*BUDGET_HEADERS, "X-Request-Id", "Authorization"]), value=FIELD_VALUE)
def test_fuzzed_header_values_get_an_answer_or_a_named_400(
    target: Target, name: str, value: str
) -> None:
    raw = value.encode("latin-1")
    status, headers, body = parse_answer(
        raw_exchange(target, http_request(GOOD_BODY, [(name.encode(), raw)]))
    )
    assert status in (200, 400), (status, body[:300])
    request_id = headers["x-request-id"]
    assert request_id.isascii()  # never an unsafe echo
    assert len(request_id) <= 128
    if status == 400:
        error = envelope(body)
        assert error["param"] == name, error


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(name=st.sampled_from(BUDGET_HEADERS), value=RAW_BYTES)
def test_header_bytes_that_are_not_http_are_refused_without_harm(
    target: Target, name: str, value: bytes
) -> None:
    started = time.monotonic()
    answer = raw_exchange(target, http_request(GOOD_BODY, [(name.encode(), value)]))
    assert time.monotonic() - started < 5
    status, _, body = parse_answer(answer)
    assert status in (200, 400), (status, body[:300])
    if status == 400 and body.startswith(b"{"):
        assert envelope(body)["param"] == name
