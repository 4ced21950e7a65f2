"""OpenAI/vLLM response shapes: whole responses, SSE chunks and usage (PURE rendering).

The shapes follow vLLM's OpenAI server so clients, the router and the profiler see what a
real engine sends: one token per chunk, finish_reason on the last token's chunk, and with
`stream_options.include_usage` a last chunk with empty `choices` and the usage.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Any

from simulator.openai_request import Route

SSE_DONE = b"data: [DONE]\n\n"


@dataclass(frozen=True, slots=True)
class ResponseIdentity:
    """Fields every object and chunk of one response repeats."""

    route: Route
    id: str
    created: int
    model: str

    @classmethod
    def new(cls, route: Route, created: int, model: str) -> ResponseIdentity:
        prefix = "chatcmpl" if route is Route.CHAT else "cmpl"
        return cls(route, f"{prefix}-{secrets.token_hex(16)}", created, model)

    def envelope(self, obj: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": None,
    }


def full_response(
    ident: ResponseIdentity, text: str, finish_reason: str, usage_body: dict[str, Any]
) -> dict[str, Any]:
    """The non-streaming answer for either route."""
    if ident.route is Route.CHAT:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": text,
            "refusal": None,
            "tool_calls": [],
        }
        choice: dict[str, Any] = {"index": 0, "message": message}
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": text}
        obj = "text_completion"
    choice |= {"logprobs": None, "finish_reason": finish_reason, "stop_reason": None}
    return ident.envelope(obj, [choice]) | {"usage": usage_body, "system_fingerprint": None}


def token_chunk(
    ident: ResponseIdentity, token: str, finish_reason: str | None, role: bool = False
) -> dict[str, Any]:
    """One streamed chunk carrying `token`; `role` adds the assistant role (chat's first)."""
    if ident.route is Route.CHAT:
        delta = {"role": "assistant", "content": token} if role else {"content": token}
        choice: dict[str, Any] = {"index": 0, "delta": delta}
        obj = "chat.completion.chunk"
    else:
        choice = {"index": 0, "text": token}
        obj = "text_completion"
    choice |= {"logprobs": None, "finish_reason": finish_reason}
    if finish_reason is not None:
        choice["stop_reason"] = None
    return ident.envelope(obj, [choice])


def usage_chunk(ident: ResponseIdentity, usage_body: dict[str, Any]) -> dict[str, Any]:
    """The final include_usage chunk: empty choices, the request's usage."""
    obj = "chat.completion.chunk" if ident.route is Route.CHAT else "text_completion"
    return ident.envelope(obj, []) | {"usage": usage_body}


def sse(obj: dict[str, Any]) -> bytes:
    """One server-sent event carrying `obj` as JSON."""
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"
