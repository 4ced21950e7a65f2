"""Request validation like vLLM: 400 for bad JSON/fields/context, 404 for another model."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.config import IMAGE_TOKENS, SimPairConfig
from simulator.openai_request import ApiError, RequestFacts, Route, parse_request

CONFIG = SimPairConfig(
    name="served", family="f", quantization="q", ttft_base_s=0, tpot_base_s=0,
    context_length=100, default_max_tokens=10, chars_per_token=4.0,
)  # fmt: skip


def parse(route: Route, body: Any) -> RequestFacts:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return parse_request(route, raw, CONFIG)


def test_chat_counts_every_message_and_keys_on_the_last_user_turn() -> None:
    facts = parse(
        Route.CHAT,
        {
            "model": "served",
            "messages": [
                {"role": "system", "content": "12345678"},
                {"role": "user", "content": [{"type": "text", "text": " hi "}]},
            ],
            "max_completion_tokens": 5,
            "stream": True,
            "stream_options": {"include_usage": True},
            "temperature": 0.2,
        },
    )
    assert facts.prompt_tokens == 3  # ceil(12 / 4)
    assert facts.lookup_text == "hi"
    assert (facts.max_tokens, facts.stream, facts.include_usage) == (5, True, True)


def test_images_and_tools_count_as_prompt_tokens_as_in_vllm() -> None:
    big = SimPairConfig.model_validate({**CONFIG.model_dump(), "context_length": 4096})
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    body = {
        "model": "served",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "abcd"}, image]}],
        "tools": tools,
        "max_tokens": 5,
    }
    facts = parse_request(Route.CHAT, json.dumps(body).encode(), big)
    schema = math.ceil(len(json.dumps(tools)) / 3)  # JSON at json_chars_per_token (3.0)
    assert facts.prompt_tokens == math.ceil(4 / 4) + schema + IMAGE_TOKENS


def test_an_image_part_counts_the_model_s_own_tokens_per_image() -> None:
    """`image_tokens` per pair (576 by default): two image parts on a model configured at
    1,500 are 3,000 prompt tokens (on 260b93e every model counted 576)."""
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    content = [{"type": "text", "text": "abcd"}, image, image]
    body = {"model": "served", "messages": [{"role": "user", "content": content}]}
    rates = {**CONFIG.model_dump(), "context_length": 8192, "image_tokens": 1_500}
    facts = parse_request(Route.CHAT, json.dumps(body).encode(), SimPairConfig(**rates))
    assert facts.prompt_tokens == 1 + 2 * 1_500
    assert CONFIG.image_tokens == IMAGE_TOKENS == 576


def test_a_tools_schema_is_counted_at_its_own_characters_per_token() -> None:
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"a": "b" * 60}}}]
    rates = {**CONFIG.model_dump(), "context_length": 4096, "json_chars_per_token": 2.0}
    body = {"model": "served", "messages": [{"role": "user", "content": "x"}], "tools": tools}
    facts = parse_request(Route.CHAT, json.dumps(body).encode(), SimPairConfig(**rates))
    assert facts.prompt_tokens == 1 + math.ceil(len(json.dumps(tools)) / 2.0)


@pytest.mark.parametrize(
    ("prompt", "tokens", "lookup"),
    [("abcdefghi", 3, "abcdefghi"), (["  x "], 1, "x"), ([1, 2, 3, 4, 5], 5, None)],
)
def test_completion_prompts(prompt: Any, tokens: int, lookup: str | None) -> None:
    facts = parse(Route.COMPLETIONS, {"prompt": prompt, "ignore_eos": True})
    assert (facts.prompt_tokens, facts.lookup_text, facts.max_tokens) == (tokens, lookup, 10)
    assert facts.ignore_eos
    assert not facts.stream


@pytest.mark.parametrize(
    ("route", "body", "status", "needle"),
    [
        (Route.CHAT, b"{oops", 400, "not valid JSON"),
        (Route.CHAT, b"[1]", 400, "JSON object"),
        (Route.CHAT, {"messages": []}, 400, "messages"),
        (Route.CHAT, {"messages": [{"content": "x"}]}, 400, "messages[0].role"),
        (Route.COMPLETIONS, {"prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
        (Route.COMPLETIONS, {"prompt": "x", "n": 2}, 400, "n"),
        (Route.COMPLETIONS, {"prompt": ["a", "b"]}, 400, "batched"),
        (Route.COMPLETIONS, {"prompt": "x", "model": "other"}, 404, "`other` does not exist"),
        (Route.COMPLETIONS, {"prompt": "x" * 400, "max_tokens": 1}, 400, "maximum context"),
        (Route.COMPLETIONS, {"prompt": "x" * 360, "max_tokens": 11}, 400, "maximum context"),
    ],
)
def test_bad_requests(route: Route, body: Any, status: int, needle: str) -> None:
    with pytest.raises(ApiError) as info:
        parse(route, body)
    assert info.value.status == status
    assert needle in info.value.message
    error = info.value.body()["error"]
    assert error["code"] == status
    assert error["type"] == ("NotFoundError" if status == 404 else "BadRequestError")


def test_prompt_that_just_fits() -> None:
    assert parse(Route.COMPLETIONS, {"prompt": "x" * 360, "max_tokens": 10}).prompt_tokens == 90


@pytest.mark.parametrize(
    ("status", "kind"),
    [(429, "RateLimitError"), (503, "ServiceUnavailableError"), (502, "BadGatewayError")],
)
def test_error_types(status: int, kind: str) -> None:
    assert ApiError(status, "m").body() == {
        "error": {"message": "m", "type": kind, "param": None, "code": status}
    }


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "model": JSON | st.just("served"),
        "prompt": JSON,
        "messages": JSON | st.just([{"role": "user", "content": "hi"}]),
        "max_tokens": JSON,
        "max_completion_tokens": JSON,
        "stream": JSON,
        "stream_options": JSON,
        "ignore_eos": JSON,
        "n": JSON,
    },
)


def outcome(route: Route, body: Any) -> RequestFacts | ApiError:
    try:
        return parse(route, json.dumps(body).encode())
    except ApiError as err:
        return err


@given(st.sampled_from(list(Route)), FIELDS | JSON)
def test_any_json_is_answered_or_rejected_with_a_4xx(route: Route, body: Any) -> None:
    result = outcome(route, body)
    if isinstance(result, ApiError):
        assert 400 <= result.status < 500
        assert result.body()["error"]["message"]
    else:
        assert result.max_tokens > 0
        assert result.prompt_tokens + result.max_tokens <= CONFIG.context_length


def test_deeply_nested_json_is_a_400() -> None:
    with pytest.raises(ApiError) as info:
        parse(Route.CHAT, b"[" * 100_000 + b"]" * 100_000)
    assert info.value.status == 400
