"""Timed OpenAI-compatible client: streamed completions timed per chunk, greedy eval answers,
and plain GETs of engine pages (`/v1/models`, `/metrics`, `/version`).

Adapter: owns no session (the composition root does) and decides nothing; a failed request
raises `RequestFailedError`, which the runner counts as an error.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp

from profiler.evals.accuracy import EvalItem
from profiler.stats import TimedStream

_SSE_DATA = b"data:"


class RequestFailedError(Exception):
    """One request failed (status, connection, timeout, stream error); `reason` is short."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def error_message(body: bytes) -> str:
    """The message of an OpenAI or vLLM error body (nested or flat), else the raw text."""
    text = body.decode(errors="replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        return text[:200]
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return str(err["message"])[:200]
        if isinstance(err, str):
            return err[:200]
    return text[:200]


def _chunk_text(chunk: dict[str, Any]) -> str:
    """Generated text of one SSE chunk: `choices[0].text` or `choices[0].delta.content`."""
    choices = chunk.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        return ""
    choice = choices[0]
    text = choice.get("text")
    if text is None:
        text = (choice.get("delta") or {}).get("content")
    return text if isinstance(text, str) else ""


def loop_time() -> float:
    """The running loop's clock: `time.monotonic`, the clock `time.perf_counter` reads too on
    Linux, on asyncio's own loop; the virtual time of a test loop, whose timers the simulated
    engines' latencies are (tests/support/virtual_time.py)."""
    return asyncio.get_running_loop().time()


class EngineClient:
    """Requests to one endpoint for one served model. Times are the running loop's clock
    (`loop_time`)."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        base_url: str,
        model: str,
        request_timeout_s: float,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self._session = session
        self._request_timeout_s = request_timeout_s

    async def stream_completion(self, prompt: str, max_tokens: int) -> TimedStream:
        """One streamed /v1/completions request of exactly `max_tokens` tokens (`ignore_eos`),
        with usage requested so prompt and completion token counts come back."""
        body = {
            "model": self.model,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        try:
            async with asyncio.timeout(self._request_timeout_s):
                return await self._stream(body, len(prompt))
        except TimeoutError as err:
            raise RequestFailedError(f"no full answer in {self._request_timeout_s:g}s") from err
        except aiohttp.ClientError as err:
            raise RequestFailedError(f"{type(err).__name__}: {err}") from err
        except ValueError as err:  # aiohttp's "line is too long" on a malformed stream
            raise RequestFailedError(f"unreadable stream: {err}") from err

    async def _stream(self, body: dict[str, Any], prompt_chars: int) -> TimedStream:
        times: list[float] = []
        usage: dict[str, Any] = {}
        started = loop_time()
        async with self._session.post(f"{self.base_url}/v1/completions", json=body) as resp:
            if resp.status != 200:
                raise RequestFailedError(f"HTTP {resp.status}: {error_message(await resp.read())}")
            async for raw in resp.content:
                now = loop_time()
                line = raw.strip()
                if not line.startswith(_SSE_DATA):
                    continue
                data = line[len(_SSE_DATA) :].strip()
                if data == b"[DONE]":
                    break
                chunk = _parse_chunk(data)
                if _chunk_text(chunk):
                    times.append(now)
                if isinstance(chunk.get("usage"), dict):
                    usage = chunk["usage"]
        finished = loop_time()
        if not times:
            raise RequestFailedError("the stream carried no generated text")
        return TimedStream(
            started_s=started,
            token_times_s=tuple(times),
            finished_s=finished,
            prompt_chars=prompt_chars,
            prompt_tokens=_count(usage, "prompt_tokens"),
            completion_tokens=_count(usage, "completion_tokens"),
        )

    async def complete(self, item: EvalItem) -> str:
        """The greedy (temperature 0) answer text for one eval item, not streamed."""
        body: dict[str, Any] = {"model": self.model, "max_tokens": item.max_tokens}
        body["temperature"] = 0.0
        if item.prompt is not None:
            path, body["prompt"] = "/v1/completions", item.prompt
        else:
            messages = [m.model_dump() for m in item.messages or ()]
            path, body["messages"] = "/v1/chat/completions", messages
        return _answer_text(await self._post(path, body))

    async def prompt_tokens(self, body: dict[str, Any]) -> int:
        """`usage.prompt_tokens` of one chat request (`body` plus the model, one output
        token, greedy), or one completions request for a body with a `prompt` and no
        `messages`: what the engine tokenized for it."""
        sent = {**body, "model": self.model, "max_tokens": 1, "temperature": 0.0}
        chat = "messages" in body or "prompt" not in body
        payload = await self._post("/v1/chat/completions" if chat else "/v1/completions", sent)
        try:
            usage = json.loads(payload)["usage"]
        except (ValueError, KeyError, TypeError) as err:
            raise RequestFailedError("the answer carries no usage") from err
        tokens = _count(usage if isinstance(usage, dict) else {}, "prompt_tokens")
        if tokens is None:
            raise RequestFailedError("the answer's usage has no prompt_tokens")
        return tokens

    async def _post(self, path: str, body: dict[str, Any]) -> bytes:
        """The body of a 200 answer to a POST; anything else is a RequestFailedError."""
        try:
            async with (
                asyncio.timeout(self._request_timeout_s),
                self._session.post(f"{self.base_url}{path}", json=body) as resp,
            ):
                payload = await resp.read()
        except TimeoutError as err:
            raise RequestFailedError(f"no answer within {self._request_timeout_s:g}s") from err
        except aiohttp.ClientError as err:
            raise RequestFailedError(f"{type(err).__name__}: {err}") from err
        if resp.status != 200:
            raise RequestFailedError(f"HTTP {resp.status}: {error_message(payload)}")
        return payload

    async def fetch(self, path: str, timeout_s: float) -> tuple[int, bytes]:
        """(status, body) of a GET; aiohttp errors and TimeoutError propagate to the caller."""
        async with (
            asyncio.timeout(timeout_s),
            self._session.get(f"{self.base_url}{path}") as resp,
        ):
            return resp.status, await resp.read()


def _parse_chunk(data: bytes) -> dict[str, Any]:
    try:
        chunk = json.loads(data)
    except ValueError as err:
        raise RequestFailedError("the stream sent a chunk that is not JSON") from err
    if not isinstance(chunk, dict):
        raise RequestFailedError("the stream sent a chunk that is not a JSON object")
    if "error" in chunk:
        raise RequestFailedError(f"stream error: {error_message(data)}")
    return chunk


def _answer_text(payload: bytes) -> str:
    try:
        data = json.loads(payload)
        choice = data["choices"][0]
        text = choice["text"] if "text" in choice else choice["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError) as err:
        raise RequestFailedError("the answer is not an OpenAI completion") from err
    return text if isinstance(text, str) else ""


def _count(usage: dict[str, Any], key: str) -> int | None:
    value = usage.get(key)
    return value if isinstance(value, int) and value > 0 else None
