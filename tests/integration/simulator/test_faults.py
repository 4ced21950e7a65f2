"""Failure injection: error status, hang, slow first token, broken stream, refused connections."""

from __future__ import annotations

import asyncio
import gc
import json
import socket
import time

import aiohttp
import openai
import pytest

from simulator.answer_key import KnownAnswer
from simulator.config import FaultConfig, SimFleetConfig
from simulator.fleet import run_fleet
from tests.integration.simulator.conftest import pair_config
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration
NAME = "sim-model"
BODY = {"model": NAME, "prompt": "hello", "max_tokens": 4}


async def test_error_rate_returns_the_configured_status(http: aiohttp.ClientSession) -> None:
    config = pair_config(NAME, faults={"error_rate": 1.0, "error_status": 429})
    async with run_fleet(SimFleetConfig(pairs=[config])) as fleet:
        async with http.post(fleet.url(NAME) + "/v1/completions", json=BODY) as resp:
            assert resp.status == 429
            assert (await resp.json())["error"]["code"] == 429
        fleet.set_faults(NAME, FaultConfig(error_rate=1.0))
        async with http.post(fleet.url(NAME) + "/v1/chat/completions", json=BODY) as resp:
            assert resp.status == 400  # validation first: a bad chat body is still a 400
        chat = {"model": NAME, "messages": [{"role": "user", "content": "x"}]}
        async with http.post(fleet.url(NAME) + "/v1/chat/completions", json=chat) as resp:
            assert resp.status == 503
        stats = fleet.stats(NAME)
    assert stats.errors_injected == 2
    assert stats.completed == 0


async def test_partial_error_rate_is_seeded() -> None:
    config = pair_config(NAME, seed=7, faults={"error_rate": 0.5})
    outcomes: list[list[int]] = []
    for _ in range(2):
        async with (
            run_fleet(SimFleetConfig(pairs=[config])) as fleet,
            aiohttp.ClientSession() as http,
        ):
            statuses = []
            for _ in range(40):
                async with http.post(fleet.url(NAME) + "/v1/completions", json=BODY) as resp:
                    statuses.append(resp.status)
            outcomes.append(statuses)
    assert outcomes[0] == outcomes[1]
    assert 5 < outcomes[0].count(503) < 35


async def test_hang_until_client_gives_up_counts_cancelled(http: aiohttp.ClientSession) -> None:
    config = pair_config(NAME, faults={"hang_rate": 1.0})
    async with run_fleet(SimFleetConfig(pairs=[config])) as fleet:
        with pytest.raises(asyncio.TimeoutError):
            async with http.post(
                fleet.url(NAME) + "/v1/completions",
                json=BODY,
                timeout=aiohttp.ClientTimeout(total=0.3),
            ):
                pass
        await eventually(lambda: fleet.stats(NAME).cancelled == 1, what="hang cancelled")
        stats = fleet.stats(NAME)
    assert (stats.hangs_injected, stats.completed, stats.running) == (1, 0, 0)


async def test_slow_first_token_delays_only_the_first_token(http: aiohttp.ClientSession) -> None:
    faults = {"slow_first_token_rate": 1.0, "slow_first_token_s": 0.3}
    config = pair_config(NAME, faults=faults)
    async with run_fleet(SimFleetConfig(pairs=[config])) as fleet:
        started = time.perf_counter()
        stream_body = {**BODY, "stream": True}
        async with http.post(fleet.url(NAME) + "/v1/completions", json=stream_body) as resp:
            assert resp.status == 200  # headers come at once, like vLLM
            headers_s = time.perf_counter() - started
            await resp.content.readuntil(b"\n\n")
            first_token_s = time.perf_counter() - started
            rest = await resp.read()
        stats = fleet.stats(NAME)
    assert first_token_s >= 0.3
    assert first_token_s - headers_s >= 0.2
    assert rest.endswith(b"data: [DONE]\n\n")
    assert stats.slow_first_tokens_injected == 1
    assert stats.completed == 1


async def test_broken_stream_has_no_done(http: aiohttp.ClientSession) -> None:
    config = pair_config(NAME, faults={"break_stream_rate": 1.0, "break_after_chunks": 2})
    async with (
        run_fleet(SimFleetConfig(pairs=[config])) as fleet,
        openai.AsyncOpenAI(
            base_url=fleet.url(NAME) + "/v1", api_key="unused", max_retries=0
        ) as api,
    ):
        received: list[str] = []
        stream = await api.completions.create(model=NAME, prompt="hi", max_tokens=10, stream=True)

        async def drain() -> None:
            async for chunk in stream:
                received.append(chunk.choices[0].text)

        with pytest.raises(openai.APIError):
            await drain()
        assert received == [" the", " quick"]
        with pytest.raises(aiohttp.ClientPayloadError):
            async with http.post(fleet.url(NAME) + "/v1/completions", json=BODY) as resp:
                await resp.read()
        stats = fleet.stats(NAME)
    assert (stats.streams_broken, stats.completed) == (2, 0)


async def test_a_stalled_answer_goes_silent_with_the_connection_open(
    http: aiohttp.ClientSession,
) -> None:
    """`stall_after_chunks`: two token chunks, then nothing (no [DONE], no close) until the
    client gives up; a non-streamed answer stops halfway through its body."""
    config = pair_config(NAME, faults={"stall_after_chunks": 2})
    async with run_fleet(SimFleetConfig(pairs=[config])) as fleet:
        url = fleet.url(NAME) + "/v1/completions"
        async with http.post(url, json={**BODY, "max_tokens": 10, "stream": True}) as resp:
            got = [await resp.content.readuntil(b"\n\n") for _ in range(2)]
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(resp.content.readuntil(b"\n\n"), 0.5)
        assert [json.loads(g[len(b"data: ") :])["choices"][0]["text"] for g in got] == [
            " the",
            " quick",
        ]
        async with http.post(url, json=BODY) as resp:
            assert resp.status == 200
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(resp.read(), 0.5)
        assert fleet.stats(NAME).completed == 0


async def test_refuse_connections_and_stop_start_pair(http: aiohttp.ClientSession) -> None:
    async with run_fleet(SimFleetConfig(pairs=[pair_config(NAME)])) as fleet:
        url = fleet.url(NAME)
        fleet.set_faults(NAME, FaultConfig(refuse_connections=True))
        with pytest.raises(aiohttp.ClientConnectorError):
            await http.get(url + "/health")
        fleet.set_faults(NAME, FaultConfig())
        async with http.get(url + "/health") as resp:
            assert resp.status == 200

        slow = asyncio.create_task(
            http.post(url + "/v1/completions", json={**BODY, "max_tokens": 1000})
        )
        await eventually(lambda: fleet.stats(NAME).running == 1, what="request running")
        fleet.stop_pair(NAME)

        async def finish() -> bytes:
            async with await slow as resp:
                return await resp.read()

        with pytest.raises(aiohttp.ClientError):
            await finish()
        with pytest.raises(aiohttp.ClientConnectorError):
            await http.get(url + "/health")
        await eventually(lambda: fleet.stats(NAME).running == 0, what="slot freed")
        await fleet.start_pair(NAME)
        assert fleet.url(NAME) == url
        async with http.post(url + "/v1/completions", json=BODY) as resp:
            assert resp.status == 200


@pytest.mark.parametrize("abort", [True, False], ids=["dies", "refuses"])
async def test_a_connection_accepted_as_the_listener_closes_is_not_leaked(abort: bool) -> None:
    """A client connects in the loop step in which the pair stops listening: the connection
    accepted then is dropped when the engine died, served when it only refuses new ones, and
    in neither case left open for the garbage collector (asyncio's own server leaked it)."""
    async with run_fleet(SimFleetConfig(pairs=[pair_config(NAME)])) as fleet:
        loop = asyncio.get_running_loop()
        host, port = fleet.url(NAME).removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=5) as client:  # in the backlog
            client.setblocking(False)
            await asyncio.sleep(0)  # the next step sees the listener readable and accepts ...
            if abort:  # ... and the pair stops before the accepted connection's own step
                loop.call_soon(fleet.stop_pair, NAME)
            else:
                loop.call_soon(fleet.set_faults, NAME, FaultConfig(refuse_connections=True))
            await asyncio.sleep(0.05)
            try:
                await loop.sock_sendall(client, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
                answer = await asyncio.wait_for(loop.sock_recv(client, 4096), timeout=5)
            except (ConnectionResetError, BrokenPipeError):
                answer = b""
        assert answer.startswith(b"HTTP/1.1 200") is not abort, answer
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((host, int(port)), timeout=5).close()
    gc.collect()  # an unclosed transport would warn here (warnings are errors)


async def test_faults_over_http(http: aiohttp.ClientSession) -> None:
    async with run_fleet(SimFleetConfig(pairs=[pair_config(NAME)])) as fleet:
        url = fleet.url(NAME)
        async with http.post(url + "/sim/faults", json={"error_rate": 2}) as resp:
            assert resp.status == 400
            assert (await resp.json())["error"]["param"] == "error_rate"
        async with http.post(url + "/sim/faults", json={"error_rate": 1, "error_status": 500}):
            pass
        async with http.post(url + "/v1/completions", json=BODY) as resp:
            assert resp.status == 500
        async with http.get(url + "/sim/stats") as resp:
            assert (await resp.json())["errors_injected"] == 1
        async with http.post(url + "/sim/reset") as resp:
            assert (await resp.json())["received"] == 0
        async with http.post(url + "/v1/completions", json=BODY) as resp:
            assert resp.status == 200  # reset restores the configured faults
        async with http.post(url + "/sim/faults", json={"refuse_connections": True}) as resp:
            assert resp.status == 200
        with pytest.raises(aiohttp.ClientConnectorError):
            await http.get(url + "/health")
        await fleet.start_pair(NAME)
        async with http.get(url + "/health") as resp:
            assert resp.status == 200


async def test_pair_configured_to_refuse_starts_closed(http: aiohttp.ClientSession) -> None:
    pairs = [pair_config(NAME, faults={"refuse_connections": True}), pair_config("other")]
    async with run_fleet(SimFleetConfig(pairs=pairs)) as fleet:
        assert fleet.url(NAME) != fleet.url("other")
        with pytest.raises(aiohttp.ClientConnectorError):
            await http.get(fleet.url(NAME) + "/health")
        async with http.get(fleet.url("other") + "/v1/models") as resp:
            assert (await resp.json())["data"][0]["id"] == "other"
        await fleet.start_pair(NAME)
        async with http.get(fleet.url(NAME) + "/v1/models") as resp:
            assert (await resp.json())["data"][0]["id"] == NAME
        assert fleet.stats("other").received == 0


async def test_slowdown_factor_slows_every_request_at_run_time(
    http: aiohttp.ClientSession,
) -> None:
    config = pair_config(NAME, ttft_base_s=0.02, tpot_base_s=0.01)
    body = {**BODY, "max_tokens": 6}

    async def timed() -> float:
        started = time.perf_counter()
        async with http.post(fleet.url(NAME) + "/v1/completions", json=body) as resp:
            assert resp.status == 200
            await resp.read()
        return time.perf_counter() - started

    async with run_fleet(SimFleetConfig(pairs=[config])) as fleet:
        normal = min([await timed() for _ in range(3)])  # 0.02 + 5 x 0.01 = 0.07 s
        fleet.set_faults(NAME, FaultConfig(slowdown_factor=3.0))
        slowed = min([await timed() for _ in range(3)])  # 0.21 s
    assert normal < 0.15
    assert slowed >= 0.2
    assert slowed > 2.2 * normal


async def test_a_slow_prompt_marker_slows_only_the_prompts_that_carry_it(
    http: aiohttp.ClientSession,
) -> None:
    config = pair_config(NAME, ttft_base_s=0.02, tpot_base_s=0.01)
    faults = FaultConfig(slow_prompt_marker="[slow path]", slow_prompt_s=0.3)

    async def timed(prompt: str) -> float:
        started = time.perf_counter()
        body = {**BODY, "prompt": prompt}
        async with http.post(fleet.url(NAME) + "/v1/completions", json=body) as resp:
            assert resp.status == 200
            await resp.read()
        return time.perf_counter() - started

    async with run_fleet(SimFleetConfig(pairs=[config])) as fleet:
        fleet.set_faults(NAME, faults)
        plain = min([await timed("hello") for _ in range(3)])  # 0.02 + 3 x 0.01 = 0.05 s
        marked = min([await timed("hello [slow path]") for _ in range(3)])  # 0.35 s
    assert plain < 0.2
    assert marked >= 0.3


async def test_accuracy_drop_lowers_the_share_of_right_answers(http: aiohttp.ClientSession) -> None:
    prompts = [f"What is {i} + 1?" for i in range(200)]
    answers = {p: KnownAnswer("math", str(i + 1)) for i, p in enumerate(prompts)}
    config = pair_config(NAME, accuracy={"math": 0.9})
    async with run_fleet(SimFleetConfig(pairs=[config]), answers=answers) as fleet:

        async def right(batch: list[tuple[int, str]]) -> int:
            count = 0
            for i, p in batch:
                body = {"model": NAME, "messages": [{"role": "user", "content": p}]}
                async with http.post(fleet.url(NAME) + "/v1/chat/completions", json=body) as r:
                    text = (await r.json())["choices"][0]["message"]["content"]
                count += text.strip() == str(i + 1)
            return count

        before = await right(list(enumerate(prompts))[:100])
        fleet.set_faults(NAME, FaultConfig(accuracy_drop=0.5))
        after = await right(list(enumerate(prompts))[100:])
    assert before >= 80
    assert after <= 55
