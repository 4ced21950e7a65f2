"""request/prompt_size.py: a body's prompt counts every part the engine tokenizes.

On 95376ca `input_chars` was the messages' text only: each test below but the first counted 0
for its part (issue 36, finding 1).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from data_plane.decision.compile import compile_table
from data_plane.decision.feasibility import input_tokens
from data_plane.domain import Budget, CompiledTable
from data_plane.request.body import parse_request_body, validated_facts
from data_plane.request.category import request_facts
from data_plane.request.fields import chat_facts
from data_plane.request.prompt_size import IMAGE_CHARS, IMAGE_TOKENS, rendered_chars
from tests.component.data_plane.fakes import make_table, pair_entry

ASK = "What is the weather in Paris?"
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather for a city in C or F.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
            "required": ["city"],
        },
    },
}


def _chars(body: dict[str, Any]) -> int:
    """`input_chars` of `body` by the fast path, checked equal to pydantic's path."""
    fast = chat_facts(body)
    assert fast is not None
    assert validated_facts(body, "chat").input_chars == fast[5]
    parsed = parse_request_body(json.dumps(body).encode(), "chat")
    assert parsed.input_chars == fast[5]
    return parsed.input_chars


def _body(content: Any = ASK, **fields: Any) -> dict[str, Any]:
    return {"model": "auto", "messages": [{"role": "user", "content": content}], **fields}


def test_rendered_json_is_counted_with_a_template_s_separators() -> None:
    """The count is `json.dumps`'s length (", " and ": "), read from orjson's bytes."""
    for value in ([TOOL], [TOOL] * 3, {"a": [1, 2, {"b": None}]}, ["x"]):
        assert rendered_chars(value) == len(json.dumps(value))


def test_a_comma_or_colon_inside_a_string_counts_one_more() -> None:
    """The stated over-count of reading separators from compact bytes."""
    value = [{"description": "Paris, France: mild"}]
    assert rendered_chars(value) == len(json.dumps(value)) + 2


def test_values_orjson_refuses_are_counted_by_json() -> None:
    """pydantic's path decodes integers past 64 bits and lone surrogates; no 500 for them."""
    big, lone = [{"n": 10**30}], ["\ud800"]
    assert rendered_chars(big) == len(json.dumps(big))
    assert rendered_chars(lone) == len(json.dumps(lone, ensure_ascii=False))


def test_text_alone_is_its_characters() -> None:
    assert _chars(_body()) == len(ASK)


def test_tools_count_their_rendered_schema() -> None:
    tools = [TOOL] * 40
    assert _chars(_body(tools=tools)) == len(ASK) + len(json.dumps(tools))


def test_an_assistant_turn_s_tool_calls_count() -> None:
    calls = [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
        }
    ]
    body = {
        "model": "auto",
        "messages": [
            {"role": "user", "content": ASK},
            {"role": "assistant", "content": None, "tool_calls": calls},
            {"role": "tool", "tool_call_id": "call_1", "content": "18 C, clear"},
        ],
    }
    # + 1: the colon inside `arguments` (the stated over-count)
    assert _chars(body) == len(ASK) + len(json.dumps(calls)) + 1 + len("18 C, clear")


@pytest.mark.parametrize("kind", ["image_url", "image", "input_image"])
def test_each_image_part_counts_the_stated_tokens(kind: str) -> None:
    image = {"type": kind, kind: {"url": "data:image/png;base64,AAAA"}}
    content = [{"type": "text", "text": ASK}, image, image]
    assert _chars(_body(content)) == len(ASK) + 2 * IMAGE_CHARS
    assert IMAGE_CHARS == 4 * IMAGE_TOKENS  # 576 tokens at the default 4 chars per token


def test_documents_count_their_rendered_json() -> None:
    documents = [{"title": "Weather", "text": "Paris is mild in spring. " * 20}]
    assert _chars(_body(documents=documents)) == len(ASK) + len(json.dumps(documents))


def test_a_response_format_schema_counts_but_json_object_adds_nothing() -> None:
    schema = {"name": "w", "schema": {"type": "object", "properties": {"c": {"type": "number"}}}}
    fmt = {"type": "json_schema", "json_schema": schema}
    assert _chars(_body(response_format=fmt)) == len(ASK) + len(json.dumps(schema))
    assert _chars(_body(response_format={"type": "json_object"})) == len(ASK)


def test_empty_or_null_parts_add_nothing() -> None:
    assert _chars(_body(tools=[], documents=None)) == len(ASK)


def test_completions_count_their_prompt_only() -> None:
    """A completions body has no template: its prompt is what the engine tokenizes."""
    raw = json.dumps({"model": "auto", "prompt": ASK, "tools": [TOOL]}).encode()
    assert parse_request_body(raw, "completions").input_chars == len(ASK)


def _compiled(rates: dict[str, float | None]) -> CompiledTable:
    """One pair per family (4.0 characters per token of text), each with its JSON figure."""
    entries = []
    for family, rate in rates.items():
        row = pair_entry(family, "fp16")
        row["json_chars_per_token"] = rate
        entries.append(row)
    return compile_table(make_table(entries))


def test_json_parts_are_weighed_by_the_alias_s_measured_rate() -> None:
    """Tools at the family's measured 2.0 characters per token: the estimate counts them
    twice as heavy as text (on c680376 a table had no figure and JSON counted as text); a
    family without the figure counts them as text, and `auto` (both families) takes the
    heavier weight (an over-estimate for the other)."""
    table = _compiled({"famj": 2.0, "famt": None})
    assert dict(table.json_weight) == {"famj": 2.0, "famj@fp16": 2.0, "auto": 2.0}
    body = {"model": "famj", "messages": [{"role": "user", "content": ASK}], "tools": [TOOL]}
    parsed = parse_request_body(json.dumps(body).encode(), "chat")
    schema = rendered_chars([TOOL])
    assert parsed.json_chars == schema
    assert parsed.input_chars == len(ASK) + schema
    weighed = {
        alias: request_facts(replace(parsed, alias=alias), table, Budget()).input_chars
        for alias in ("famj", "famt", "auto")
    }
    assert weighed == {
        "famj": len(ASK) + 2 * schema,
        "famt": len(ASK) + schema,
        "auto": len(ASK) + 2 * schema,
    }
    plain = parse_request_body(json.dumps(body | {"tools": []}).encode(), "chat")
    assert plain.json_chars == 0
    assert request_facts(plain, table, Budget()).input_chars == len(ASK)


def test_images_are_not_json() -> None:
    content = [{"type": "text", "text": ASK}, IMAGE]
    parsed = validated_facts(
        {"model": "m", "messages": [{"role": "user", "content": content}]}, "chat"
    )
    assert (parsed.input_chars, parsed.json_chars, parsed.images) == (len(ASK) + IMAGE_CHARS, 0, 1)


IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}


def _images_table(figures: dict[str, tuple[int | None, float]]) -> CompiledTable:
    """One pair per family, each with (its tokens per image, its characters per token)."""
    entries = []
    for family, (tokens, chars_per_token) in figures.items():
        row = pair_entry(family, "fp16")
        row |= {"image_tokens": tokens, "chars_per_token": chars_per_token}
        entries.append(row)
    return compile_table(make_table(entries))


def _image_tokens(table: CompiledTable, alias: str, images: int, family: str) -> int:
    """Input tokens `family`'s pair is asked for: a question and `images` image parts sent
    to `alias`, less the question's own tokens."""
    body = _body([{"type": "text", "text": ASK}, *[IMAGE] * images]) | {"model": alias}
    parsed = parse_request_body(json.dumps(body).encode(), "chat")
    assert parsed.images == images
    chars = request_facts(parsed, table, Budget()).input_chars
    pair = next(p for p in table.pairs if p.family == family)
    return input_tokens(pair, chars) - input_tokens(pair, len(ASK))


def test_image_parts_are_sized_at_the_model_s_measured_tokens_per_image() -> None:
    """A family whose profile measured 1,500 tokens per image: two image parts are 3,000
    input tokens (on 260b93e, 1,152: 576 each, whatever the profile). A family without the
    figure counts 576 each at its own characters per token (on 260b93e 658 at 3.5), and
    `auto` (both) takes the larger per image (an over-estimate for the other)."""
    table = _images_table({"famv": (1_500, 4.0), "famt": (None, 3.5)})
    assert dict(table.image_chars) == {
        "famv": 6_000, "famv@fp16": 6_000, "famt": 2_016, "famt@fp16": 2_016, "auto": 6_000,
    }  # fmt: skip
    assert _image_tokens(table, "famv", 2, "famv") == 3_000
    assert _image_tokens(table, "famt", 2, "famt") == 2 * 576
    assert _image_tokens(table, "auto", 2, "famv") == 3_000
    assert _image_tokens(table, "auto", 1, "famt") == pytest.approx(6_000 / 3.5, abs=1)


def test_a_table_without_the_figure_sizes_an_image_at_576_tokens() -> None:
    """Profiles from before the measurement (no `image_tokens`) at 4 characters per token:
    the alias is not in `image_chars` and an image part is IMAGE_CHARS, 576 tokens."""
    table = _images_table({"famt": (None, 4.0)})
    assert dict(table.image_chars) == {}
    assert _image_tokens(table, "famt", 3, "famt") == 3 * IMAGE_TOKENS == 1_728


def test_a_text_only_request_is_not_priced_for_images() -> None:
    """The figure moves only bodies with image parts (`weighed_chars` reads it only then)."""
    table = _images_table({"famv": (2_880, 4.0)})
    parsed = parse_request_body(json.dumps(_body() | {"model": "famv"}).encode(), "chat")
    assert (parsed.images, request_facts(parsed, table, Budget()).input_chars) == (0, len(ASK))


def test_the_turns_and_the_tools_part_of_the_json_are_counted_apart() -> None:
    """For the chat template's figures (`prompt_tokens.templated_chars`): the turns, and the
    part of `json_chars` that is `tools` (not documents, a schema, or a turn's tool calls),
    alike on both paths; a completions body has no turns."""
    documents = [{"title": "Weather"}]
    calls = [{"id": "1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    body = _body(tools=[TOOL], documents=documents)
    body["messages"].append({"role": "assistant", "content": None, "tool_calls": calls})
    fast = chat_facts(body)
    assert fast is not None
    slow = validated_facts(body, "chat")
    assert (slow.messages, slow.tools_chars) == (2, len(json.dumps([TOOL])))
    assert slow == parse_request_body(json.dumps(body).encode(), "chat") == type(slow)(*fast)
    assert slow.json_chars == sum(len(json.dumps(v)) for v in ([TOOL], documents, calls))
    raw = json.dumps({"model": "auto", "prompt": ASK, "tools": [TOOL]}).encode()
    parsed = parse_request_body(raw, "completions")
    assert (parsed.messages, parsed.tools_chars) == (0, 0)
