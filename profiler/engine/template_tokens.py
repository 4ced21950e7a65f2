"""What the served model's chat template adds to a chat body's text, measured on the engine.

An engine tokenizes the rendered chat template, not the texts alone: turn markers and a role
per message, a BOS and the generation prompt per prompt, and the tools as the template
renders them (a preamble and their JSON, or, Gemma's turn format, nothing). The data plane
counts a body's texts with the tokenizer file (`contracts.prompt_text.prompt_parts`) and adds
this (`contracts.tokenizer_ref.TemplateTokens`; docs/profiler.md, "Chat template").

The measure: conversations of 1, 3 and 5 turns, and the first with each probe tools list
(`token_rates.PROBES`); each one's `usage.prompt_tokens` against its parts counted by the
tokenizer file as the data plane counts them. Least squares over the turns gives the tokens
per message and the fixed tokens; over the tools probes, the preamble and the engine's tokens
per counted tools token; the first again with its text padded with whitespace, whose count
is the plain one's where the template `trim`s each turn (`TemplateTokens.trims`). Tools are
sent as traffic sends them, and again with
`tool_choice: "none"` when the engine refuses that (vLLM without a tool parser answers 400
to tools with the default `auto`): how the template renders them is the same.

A completions prompt gets no template, but the engine adds the tokenizer's special tokens to
it (vLLM's `/v1/completions` defaults to `add_special_tokens=True`: Gemma's `<bos>`), where a
chat request gets them from its template: one completions request's `usage.prompt_tokens`
against the count of its text is `TokenizerRef.special_tokens`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from tokenizers import Tokenizer

from contracts.prompt_text import PromptParts, prompt_parts
from contracts.tokenizer_ref import TemplateTokens, TokenizerRef
from profiler.engine.client import RequestFailedError
from profiler.engine.token_rates import PROBES, PromptCounter

logger = logging.getLogger(__name__)

TURNS = (
    {"role": "system", "content": "You are a careful assistant. Answer in one sentence."},
    {"role": "user", "content": "What is the weather in Paris today?"},
    {"role": "assistant", "content": "It is sunny in Paris, with a light wind from the west."},
    {"role": "user", "content": "And what will it be like tomorrow morning?"},
    {"role": "assistant", "content": "Rain is likely before noon, then clearing skies."},
)
CONVERSATIONS = (TURNS[1:2], TURNS[1:4], TURNS)  # 1, 3 and 5 turns
MAX_SPECIAL_TOKENS = 64  # `TokenizerRef.special_tokens`' bound


def _line(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line through `points` (x, y)."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    slope = 0.0 if spread == 0 else sum((x - mean_x) * (y - mean_y) for x, y in points) / spread
    return mean_y - slope * mean_x, slope


def fit(
    turns: Sequence[tuple[int, int]], tools: Sequence[tuple[int, int]] | None
) -> TemplateTokens:
    """The template's tokens from (messages, engine tokens - counted text tokens) per
    conversation and (counted tools tokens, engine tokens added by the tools) per tools probe
    (None: not measured, the tools counted as their JSON)."""
    fixed, per_message = _line([(float(m), float(extra)) for m, extra in turns])
    tools_fixed, tools_scale = 0.0, 1.0
    if tools:
        tools_fixed, tools_scale = _line([(float(t), float(extra)) for t, extra in tools])
        if tools_scale < 0.0:  # noise around a template that renders none
            tools_scale = 0.0
            tools_fixed = sum(extra for _, extra in tools) / len(tools)
    return TemplateTokens(
        fixed=round(fixed, 3),
        per_message=round(per_message, 3),
        tools_fixed=round(tools_fixed, 3),
        tools_scale=round(min(tools_scale, 16.0), 3),
    )


def _counted(tokenizer: Tokenizer, parts: PromptParts) -> tuple[int, int]:
    """(the text's tokens, the tools' tokens) as the data plane counts them."""
    texts = [parts.text, parts.tools]
    text, tools = tokenizer.encode_batch(texts, add_special_tokens=False)
    return len(text.ids), len(tools.ids) if parts.tools else 0


async def _with_tools(client: PromptCounter, body: dict[str, Any]) -> int:
    try:
        return await client.prompt_tokens(body)
    except RequestFailedError:
        return await client.prompt_tokens({**body, "tool_choice": "none"})


async def _load(ref: TokenizerRef) -> Tokenizer | None:
    try:
        return await asyncio.to_thread(Tokenizer.from_file, ref.id)
    except Exception as err:  # the library raises a bare Exception for a bad file
        logger.warning("chat template not measured: %s does not load: %s", ref.id, err)
        return None


async def measure_template(client: PromptCounter, ref: TokenizerRef) -> TemplateTokens | None:
    """What the engine's chat template adds, counted with the tokenizer file `ref` names;
    None (logged) when the file does not load or the engine gives no usage."""
    tokenizer = await _load(ref)
    return None if tokenizer is None else await _template(client, tokenizer)


async def measure_special_tokens(client: PromptCounter, tokenizer: Tokenizer) -> int | None:
    """The special tokens the engine adds to a completions prompt: one request's
    `usage.prompt_tokens` less `tokenizer`'s count of its text (the data plane's, no special
    tokens); None (logged) when the engine answers no completions or counts fewer."""
    text = TURNS[1]["content"]
    try:
        engine = await client.prompt_tokens({"prompt": text})
    except RequestFailedError as err:
        logger.warning("completions' special tokens not measured: %s", err)
        return None
    (counted,) = tokenizer.encode_batch([text], add_special_tokens=False)
    special = engine - len(counted.ids)
    if not 0 <= special <= MAX_SPECIAL_TOKENS:
        logger.warning("completions' special tokens not measured: the engine counts %d", special)
        return None
    return special


async def _template(client: PromptCounter, tokenizer: Tokenizer) -> TemplateTokens | None:
    turns: list[tuple[int, int]] = []
    try:
        for conversation in CONVERSATIONS:
            body = {"messages": list(conversation)}
            text, _ = _counted(tokenizer, prompt_parts(body))
            turns.append((len(conversation), await client.prompt_tokens(body) - text))
    except RequestFailedError as err:
        logger.warning("chat template not measured: %s", err)
        return None
    base = {"messages": list(CONVERSATIONS[0])}
    engine_base = turns[0][1] + _counted(tokenizer, prompt_parts(base))[0]
    (turn,) = CONVERSATIONS[0]
    padded = {"messages": [{**turn, "content": f"  {turn['content']}\n\n"}]}
    try:
        trims = await client.prompt_tokens(padded) == engine_base
    except RequestFailedError as err:
        logger.warning("chat template not measured: %s", err)
        return None
    tools: list[tuple[int, int]] = []
    try:
        for probe in PROBES:
            body = {**base, "tools": probe}
            _, counted = _counted(tokenizer, prompt_parts(body))
            tools.append((counted, await _with_tools(client, body) - engine_base))
    except RequestFailedError as err:
        logger.warning("chat template's tools not measured (counted as their JSON): %s", err)
        return fit(turns, None).model_copy(update={"trims": trims})
    return fit(turns, tools).model_copy(update={"trims": trims})


async def with_template(client: PromptCounter, ref: TokenizerRef | None) -> TokenizerRef | None:
    """`ref` with what the engine's chat template adds (`measure_template`) and the special
    tokens it adds to a completions prompt (`measure_special_tokens`), where measured."""
    if ref is None:
        return None
    tokenizer = await _load(ref)
    if tokenizer is None:
        return ref
    template = await _template(client, tokenizer)
    special = await measure_special_tokens(client, tokenizer)
    update = {"template": template, "special_tokens": special}
    return ref.model_copy(update={k: v for k, v in update.items() if v is not None})
