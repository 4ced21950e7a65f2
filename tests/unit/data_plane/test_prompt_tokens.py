"""A prompt counted by the served model's tokenizer (docs/data_plane.md, "Prompt size"): what
is counted, how much of it, and how the count becomes the one estimate every consumer reads."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from contracts.prompt_text import PromptParts, prompt_parts, prompt_text
from contracts.tokenizer_ref import TemplateTokens
from data_plane.decision.compile import MAX_CONTEXTS, compile_table
from data_plane.decision.feasibility import input_tokens
from data_plane.domain import Budget, CompiledTable
from data_plane.request.body import parse_request_body
from data_plane.request.category import request_facts
from data_plane.request.prompt_size import IMAGE_CHARS, rendered_chars
from data_plane.request.prompt_tokens import (
    PromptCount,
    count_parts,
    count_prompt,
    counted_chars,
)
from tests.component.data_plane.fakes import make_table, pair_entry

SHA_A, SHA_B = "a" * 64, "b" * 64
TOOL = {"type": "function", "function": {"name": "wetter", "description": "Wetter für Köln"}}
IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}


def _ref(sha: str) -> dict[str, str]:
    return {"id": f"/models/{sha[:4]}/tokenizer.json", "sha256": sha}


def _table(rows: list[tuple[str, str, str | None, float]]) -> CompiledTable:
    """(family, quantization, tokenizer SHA-256 or None, chars_per_token) per pair."""
    entries = []
    for family, quant, sha, chars_per_token in rows:
        row = pair_entry(family, quant, context_length=1000)
        row |= {"chars_per_token": chars_per_token, "tokenizer": sha and _ref(sha)}
        entries.append(row)
    return compile_table(make_table(entries))


def test_the_text_counted_is_every_part_the_template_renders() -> None:
    """Each turn's text (a string or text parts), a turn's tool calls, the tools, documents
    and a response_format schema as `tojson` renders them (non-ASCII as is); not image
    parts; a completions prompt as it is."""
    calls = [{"id": "c1", "type": "function", "function": {"name": "wetter", "arguments": "{}"}}]
    doc: dict[str, Any] = {
        "messages": [
            {"role": "system", "content": "Sei kurz."},
            {"role": "user", "content": [{"type": "text", "text": "Wie ist das Wetter?"}, IMAGE]},
            {"role": "assistant", "content": None, "tool_calls": calls},
        ],
        "tools": [TOOL],
        "documents": [{"title": "Köln"}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "w"}},
    }
    parts = [
        "Sei kurz.",
        "Wie ist das Wetter?",
        json.dumps(calls, ensure_ascii=False),
        '[{"title": "Köln"}]',
        '{"name": "w"}',
    ]
    tools = json.dumps([TOOL], ensure_ascii=False)
    assert prompt_text(doc) == "\n".join([*parts, tools])
    assert prompt_parts(doc) == PromptParts("\n".join(parts), tools, 3)
    assert prompt_parts({"prompt": "def f(x):"}) == PromptParts("def f(x):", "", None, 1)
    assert prompt_parts({"prompt": ["a", "b"]}) == PromptParts("a\nb", "", None, 2)
    assert prompt_text({"prompt": "def f(x):"}) == "def f(x):"
    assert prompt_text({"prompt": ["a", "b"]}) == "a\nb"
    assert prompt_text({"messages": "not a list"}) == ""
    padded = {"messages": [{"role": "user", "content": [{"type": "text", "text": " a "}, IMAGE]}]}
    padded["messages"].append({"role": "user", "content": "b\n", "tool_calls": calls})
    trimmed = PromptParts("\n".join(["a", "b", json.dumps(calls)]), "", 2)
    assert prompt_parts(padded, trim=True) == trimmed  # as a template's `trim` renders them
    assert prompt_parts(padded).text == "\n".join([" a ", "b\n", json.dumps(calls)])


def test_a_huge_prompt_is_counted_up_to_its_limit_and_the_rest_priced_per_character() -> None:
    """A client's prompt a hundred contexts long costs the counter `max_chars` of text, not
    the whole prompt: the count reads only that much."""
    read: list[int] = []

    def count(text: str) -> int:
        read.append(len(text))
        return len(text) // 2

    counted = count_prompt(count, "x" * 100_000, 1_000, SHA_A)
    assert read == [1_000]
    assert counted == PromptCount(SHA_A, 500, 99_000)
    assert count_prompt(count, "x" * 800, 1_000, SHA_A) == PromptCount(SHA_A, 400, 0)


def test_a_measured_template_adds_its_tokens_per_prompt_per_turn_and_for_tools() -> None:
    """Gemma's turn format (5 per prompt, 4 per turn, tools not rendered): 3 turns and tools
    count the text alone plus 17, the tools' JSON not at all; a `tojson` template with a
    preamble counts the tools once more; a completions prompt, or a table without the
    template, counts the text as it is (the tools joined to it by a newline)."""

    def count(text: str) -> int:
        return len(text.split())

    doc = {
        "messages": [{"role": "user", "content": "eins zwei"}] * 3,
        "tools": [TOOL],
    }
    parts = prompt_parts(doc)
    text, tools = count(parts.text), count(parts.tools)
    gemma = TemplateTokens(fixed=5, per_message=4, tools_fixed=0, tools_scale=0)
    table = _table([("fama", "fp16", SHA_A, 4.0)])
    plain = table.tokenizers["fama"]
    assert count_parts(count, parts, plain) == PromptCount(SHA_A, count(parts.joined()))
    templated = replace(plain, template=gemma)
    assert count_parts(count, parts, templated) == PromptCount(SHA_A, text + 5 + 3 * 4)
    tojson = TemplateTokens(fixed=1, per_message=3, tools_fixed=12.5, tools_scale=1)
    with_tools = replace(plain, template=tojson)
    assert count_parts(count, parts, with_tools).tokens == text + 1 + 9 + 13 + tools
    completion = prompt_parts({"prompt": "eins zwei drei"})
    assert count_parts(count, completion, templated) == PromptCount(SHA_A, 3)


def test_a_completions_prompt_adds_the_special_tokens_the_engine_adds_to_each_prompt() -> None:
    """vLLM's /v1/completions adds the tokenizer's special tokens (Gemma's BOS: 1) to each
    prompt; where the profiler measured them, the count adds them per prompt, to the text
    alone; a chat body (its BOS is its template's) and a table without them do not."""

    def count(text: str) -> int:
        return len(text.split())

    plain = _table([("fama", "fp16", SHA_A, 4.0)]).tokenizers["fama"]
    assert plain.special_tokens == 0
    bos = replace(plain, special_tokens=1)
    one = prompt_parts({"prompt": "eins zwei drei"})
    assert count_parts(count, one, plain) == PromptCount(SHA_A, 3)
    assert count_parts(count, one, bos) == PromptCount(SHA_A, 4)
    two = prompt_parts({"prompt": ["eins zwei", "drei"]})
    assert count_parts(count, two, bos) == PromptCount(SHA_A, 3 + 2)
    chat = prompt_parts({"messages": [{"role": "user", "content": "eins zwei drei"}]})
    assert count_parts(count, chat, bos) == PromptCount(SHA_A, 3)
    gemma = TemplateTokens(fixed=5, per_message=4)
    assert count_parts(count, chat, replace(bos, template=gemma)) == PromptCount(SHA_A, 12)
    long = prompt_parts({"prompt": "x " * 5_000})  # past max_chars: the rest per character
    capped = replace(bos, max_chars=1_000)
    assert count_parts(count, long, capped) == PromptCount(SHA_A, 500 + 1, 9_000)


def test_a_template_s_count_reads_at_most_the_alias_s_characters() -> None:
    """The text first, then the tools in what is left of `max_chars`; the rest is priced per
    character, as without a template."""
    read: list[int] = []

    def count(text: str) -> int:
        read.append(len(text))
        return len(text) // 2

    plain = _table([("fama", "fp16", SHA_A, 4.0)]).tokenizers["fama"]
    ref = replace(plain, max_chars=1_000, template=TemplateTokens(fixed=0, per_message=0))
    parts = PromptParts("x" * 800, "y" * 5_000, 1)
    counted = count_parts(count, parts, ref)
    assert read == [800, 200]
    assert counted == PromptCount(SHA_A, 400 + 100, 4_800)


def test_an_alias_has_a_tokenizer_only_when_every_pair_names_the_same_file() -> None:
    """Two quantizations of one family name one file: the family's aliases count with it, each
    token at the larger chars_per_token (no pair's estimate falls below the count), reading
    at most MAX_CONTEXTS contexts' characters; a family with a pair naming none (but that
    pair's own alias), and `auto` over families with two files, are priced per character."""
    table = _table(
        [
            ("fama", "fp16", SHA_A, 4.0),
            ("fama", "int4", SHA_A, 4.5),
            ("famb", "fp16", SHA_B, 4.0),
            ("famc", "fp16", SHA_B, 4.0),
            ("famc", "int4", None, 4.0),
        ]
    )
    named = {"fama", "fama@fp16", "fama@int4", "famb", "famb@fp16", "famc@fp16"}
    assert set(table.tokenizers) == named
    family = table.tokenizers["fama"]
    assert (family.sha256, family.token_chars) == (SHA_A, 4.5)
    assert family.max_chars == MAX_CONTEXTS * 1000 * 4.5
    assert table.tokenizers["fama@fp16"].token_chars == 4.0
    assert "auto" not in table.tokenizers


def _facts_chars(table: CompiledTable, body: dict[str, Any], counted: PromptCount | None) -> int:
    parsed = parse_request_body(json.dumps(body).encode(), "chat")
    return request_facts(parsed, table, Budget(), counted).input_chars


def test_a_count_by_the_alias_s_tokenizer_is_the_estimate_every_pair_reads() -> None:
    """300 tokens by the family's tokenizer: each pair of the family is asked for at least
    300 input tokens (4.5 characters each, the larger figure), whatever the characters say;
    image parts are added at the table's figure. A count by another file (the table
    changed under it), or for an alias without a tokenizer, is not used."""
    table = _table([("fama", "fp16", SHA_A, 4.0), ("fama", "int4", SHA_A, 4.5)])
    body = {"model": "fama", "messages": [{"role": "user", "content": "Köln " * 200}]}
    counted = PromptCount(SHA_A, 300)
    chars = _facts_chars(table, body, counted)
    assert chars == 300 * 4.5
    assert sorted(input_tokens(p, chars) for p in table.pairs) == [300, 338]
    assert _facts_chars(table, body, PromptCount(SHA_B, 300)) == 1000
    assert _facts_chars(table, body, None) == 1000
    with_image = {
        "model": "fama",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Was?"}, IMAGE]}],
    }
    image = table.image_chars.get("fama", IMAGE_CHARS)  # 576 tokens at 4.5
    assert _facts_chars(table, with_image, counted) == 300 * 4.5 + image
    rest = PromptCount(SHA_A, 300, rest_chars=5_000)
    assert _facts_chars(table, body, rest) == 300 * 4.5 + 5_000
    other = replace(table, tokenizers={})
    parsed = parse_request_body(json.dumps(body).encode(), "chat")
    assert request_facts(parsed, other, Budget(), counted).input_chars == 1000


@given(
    tokens=st.integers(min_value=0, max_value=200_000),
    largest=st.floats(min_value=1.0, max_value=12.0),
    smaller=st.floats(min_value=0.05, max_value=1.0),
)
def test_a_count_reads_back_exactly_at_the_largest_figure_and_no_lower_at_any(
    tokens: int, largest: float, smaller: float
) -> None:
    """The count's characters, each token at the alias's largest characters per token, read
    back as the count itself on the pair at that figure (7b80295 read one token more whenever
    the product was not whole: the real engine's 221 read 222), and as no less on a pair at
    any smaller figure; below one character per token, never less either."""
    table = _table([("fama", "fp16", SHA_A, largest), ("fama", "int4", SHA_A, largest * smaller)])
    ref = table.tokenizers["fama"]
    chars = counted_chars(PromptCount(SHA_A, tokens), ref)
    top, lower = sorted(table.pairs, key=lambda p: -p.chars_per_token)
    assert input_tokens(top, chars) == tokens
    assert input_tokens(lower, chars) >= tokens
    tiny = replace(ref, token_chars=smaller)
    assert (
        input_tokens(
            replace(top, chars_per_token=smaller), counted_chars(PromptCount(SHA_A, tokens), tiny)
        )
        >= tokens
    )


def _templated(table: CompiledTable, template: TemplateTokens) -> CompiledTable:
    tokenizers = {a: replace(t, template=template) for a, t in table.tokenizers.items()}
    return replace(table, tokenizers=tokenizers)


def test_a_body_priced_per_character_adds_the_template_s_tokens_too() -> None:
    """No count (a small body): the characters add what the alias's template adds, by the
    rule a count adds it (`TemplateTokens.added`), and the newline a count holds between two
    turns (which the measured figures leave out), each token at the alias's largest
    chars_per_token (4.5): Gemma's measured 5 per prompt and 4 per turn and 2 joins, 19
    tokens for 3 turns, and the tools' characters left out (it renders none); a `tojson`
    template's preamble and the tools' characters once. A table without the template, a
    completions prompt, and a count by the tokenizer (which adds the template itself) are as
    before."""
    table = _table([("fama", "fp16", SHA_A, 4.0), ("fama", "int4", SHA_A, 4.5)])
    doc = {"model": "fama", "messages": [{"role": "user", "content": "eins zwei"}] * 3}
    with_tools = doc | {"tools": [TOOL]}
    text, tools = 3 * len("eins zwei"), rendered_chars([TOOL])
    assert _facts_chars(table, doc, None) == text
    assert _facts_chars(table, with_tools, None) == text + tools
    gemma = _templated(table, TemplateTokens(fixed=5, per_message=4, tools_scale=0))
    assert _facts_chars(gemma, doc, None) == text + math.ceil(19 * 4.5)
    assert _facts_chars(gemma, with_tools, None) == text + math.ceil(19 * 4.5)
    tojson = _templated(table, TemplateTokens(fixed=1, per_message=3, tools_fixed=12.5))
    assert _facts_chars(tojson, doc, None) == text + math.ceil(12 * 4.5)
    assert _facts_chars(tojson, with_tools, None) == text + math.ceil(24.5 * 4.5) + tools
    counted = PromptCount(SHA_A, 300)
    assert _facts_chars(gemma, with_tools, counted) == 300 * 4.5
    prompt = json.dumps({"model": "fama", "prompt": "eins zwei drei"}).encode()
    parsed = parse_request_body(prompt, "completions")
    assert request_facts(parsed, gemma, Budget()).input_chars == len("eins zwei drei")


def test_the_template_replaces_the_tools_weighed_json_not_the_rest() -> None:
    """With a measured JSON rate (weight 2: JSON twice as many tokens per character), a
    template rendering the tools twice over (`indent=4`) counts their weighed characters
    twice; a turn's tool_calls stay weighed as they are, since the template's factor is the
    tools'."""
    table = _table([("fama", "fp16", SHA_A, 4.0)])
    table = replace(table, json_weight={"fama": 2.0})
    calls = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    doc = {
        "model": "fama",
        "messages": [{"role": "assistant", "content": None, "tool_calls": calls}],
        "tools": [TOOL],
    }
    plain = 2 * rendered_chars(calls) + 2 * rendered_chars([TOOL])
    assert _facts_chars(table, doc, None) == plain
    double = _templated(table, TemplateTokens(fixed=0, per_message=0, tools_scale=2))
    assert _facts_chars(double, doc, None) == plain + 2 * rendered_chars([TOOL])
