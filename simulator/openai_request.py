"""Inbound OpenAI request bodies, validated like vLLM does, reduced to the facts we simulate.

Only the fields the simulator uses are parsed (unknown ones are allowed and ignored). Every
problem becomes an `ApiError` with vLLM's status and error shape; never a 500.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from http import HTTPStatus
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from simulator.answer_key import content_text, last_user_text
from simulator.completion import count_tokens
from simulator.config import SimPairConfig, format_loc
from simulator.tokenizer_count import schema_tokens, tokens_of

_ERROR_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    429: "RateLimitError",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
}


class ApiError(Exception):
    """An error answer: HTTP status plus vLLM's body `{"error": {message, type, param, code}}`."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param

    def body(self) -> dict[str, Any]:
        default = HTTPStatus(self.status).phrase.replace(" ", "") + "Error"
        err_type = _ERROR_TYPES.get(self.status, default)
        info = {"message": self.message, "type": err_type, "param": self.param}
        return {"error": {**info, "code": self.status}}


class Route(StrEnum):
    COMPLETIONS = "completions"
    CHAT = "chat_completions"


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow")


class StreamOptions(_Body):
    include_usage: bool = False


class _Request(_Body):
    model: str | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    ignore_eos: bool = False
    n: int = Field(default=1, ge=1, le=1)


class CompletionRequest(_Request):
    prompt: str | list[str] | list[int]


class ChatMessage(_Body):
    role: str
    content: str | list[dict[str, Any]] | None = None


class ChatRequest(_Request):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    tools: list[Any] | None = None


R = TypeVar("R", bound=_Request)


@dataclass(frozen=True, slots=True)
class RequestFacts:
    """What the simulated engine needs from one request."""

    route: Route
    stream: bool
    include_usage: bool
    prompt_tokens: int
    max_tokens: int
    ignore_eos: bool
    lookup_text: str | None


def _validated(model: type[R], raw: bytes) -> R:
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ApiError(400, f"request body is not valid JSON: {err}") from err
    except RecursionError as err:
        raise ApiError(400, "request body is nested too deeply") from err
    if not isinstance(data, dict):
        raise ApiError(400, "request body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = format_loc(tuple(first["loc"]))
        raise ApiError(400, f"{where}: {first['msg']}", param=where) from err


def _text_tokens(text: str, config: SimPairConfig) -> int:
    if config.tokenizer is not None:
        return tokens_of(config.tokenizer, text)
    return count_tokens(len(text), config.chars_per_token)


def _completion_prompt(req: CompletionRequest, config: SimPairConfig) -> tuple[int, str | None]:
    """Prompt tokens as vLLM's /v1/completions counts them: a text prompt's tokens, with a
    `tokenizer` plus the `special_tokens` it adds to each (a BOS); token ids as they are."""
    prompt = req.prompt
    special = config.special_tokens if config.tokenizer is not None else 0
    if isinstance(prompt, str):
        return _text_tokens(prompt, config) + special, prompt.strip()
    if len(prompt) == 0 or not all(isinstance(p, str) for p in prompt):
        return len(prompt), None  # token ids: the count is exact, the text unknown
    if len(prompt) > 1:
        raise ApiError(400, "batched prompts are not supported by the simulator", "prompt")
    text = str(prompt[0])
    return _text_tokens(text, config) + special, text.strip()


def _image_parts(content: Any) -> int:
    if not isinstance(content, list):
        return 0
    return sum(1 for p in content if isinstance(p, dict) and p.get("type") == "image_url")


def _chat_prompt(req: ChatRequest, config: SimPairConfig) -> tuple[int, str | None]:
    """Prompt tokens as vLLM counts them: the text of every turn, each image part as the
    model's `image_tokens`, and the `tools` schema's JSON (the chat template renders it into the
    prompt) at `json_chars_per_token`, finer than prose as a real tokenizer splits it; with a
    `tokenizer`, the text of each turn and the tools' JSON are its counts, plus the template's
    own tokens (`template_tokens`), the tools' only where it renders them."""
    images = sum(_image_parts(m.content) for m in req.messages)
    dumped = [m.model_dump() for m in req.messages]
    if config.tokenizer is not None:
        texts = sum(tokens_of(config.tokenizer, content_text(m.content)) for m in req.messages)
        tools = schema_tokens(config.tokenizer, req.tools) if config.template_renders_tools else 0
        fixed, per_turn = config.template_tokens
        template = fixed + per_turn * len(req.messages)
        return texts + tools + template + images * config.image_tokens, last_user_text(dumped)
    chars = sum(len(content_text(m.content)) for m in req.messages)
    schema_chars = len(json.dumps(req.tools)) if req.tools else 0
    tokens = count_tokens(chars, config.chars_per_token) + images * config.image_tokens
    tokens += count_tokens(schema_chars, config.json_chars_per_token)
    return tokens, last_user_text(dumped)


def parse_request(route: Route, raw: bytes, config: SimPairConfig) -> RequestFacts:
    """Validate a body for `route` against the served model; raise ApiError like vLLM."""
    if route is Route.CHAT:
        chat = _validated(ChatRequest, raw)
        prompt_tokens, lookup = _chat_prompt(chat, config)
        asked = chat.max_completion_tokens or chat.max_tokens
        req: _Request = chat
    else:
        completion = _validated(CompletionRequest, raw)
        prompt_tokens, lookup = _completion_prompt(completion, config)
        asked = completion.max_tokens
        req = completion
    if req.model is not None and req.model != config.name:
        raise ApiError(404, f"The model `{req.model}` does not exist.", "model")
    max_tokens = asked or config.default_max_tokens
    if prompt_tokens + max_tokens > config.context_length:
        raise ApiError(
            400,
            f"This model's maximum context length is {config.context_length} tokens. However, "
            f"you requested {prompt_tokens + max_tokens} tokens ({prompt_tokens} in the "
            f"input, {max_tokens} in the completion). Please reduce the length of the input "
            "or completion.",
            "max_tokens",
        )
    include_usage = bool(req.stream_options and req.stream_options.include_usage)
    return RequestFacts(
        route, req.stream, include_usage, prompt_tokens, max_tokens, req.ignore_eos, lookup
    )
