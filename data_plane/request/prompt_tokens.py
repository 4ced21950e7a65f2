"""The text an engine tokenizes, for a count by the served model's own tokenizer.

PURE. `count_prompt` counts the tokens of `contracts.prompt_text`'s text (what a body's
template renders: each turn's text, its `tool_calls`, the `tools`, `documents` and a
`response_format` schema as JSON, or a completions `prompt`, joined by newlines) with a
counter handed in (the tokenizer the table names for the alias, `data_plane.prompt_counter`),
reading at most the alias's
`max_chars` (a longer prompt is refused by its context whatever its count; the rest is priced
per character). `counted_chars` turns a count into the one estimate's characters
(`category.weighed_chars`). Image parts stay priced at the model's tokens per image.
`count_parts` adds what the chat template adds (turn markers, BOS, the generation prompt, the
tools as it renders them), where the profiler measured it (`TokenizerRef.template`);
`templated_chars` adds the same (`TemplateTokens.added`) to a body priced per character. A
completions prompt adds the tokenizer's special tokens (its BOS) per prompt, both ways
(`count_parts`, `special_chars`), where the profiler measured them
(`TokenizerRef.special_tokens`).
docs/data_plane.md, "Prompt size".
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from contracts.prompt_text import PromptParts
from contracts.tokenizer_ref import TemplateTokens
from data_plane.domain import AliasTokenizer

# Counts the tokens of one text (no special tokens): the loaded tokenizer, or a test's own.
TokenCount = Callable[[str], int]


@dataclass(frozen=True, slots=True)
class PromptCount:
    """A body's tokens as the tokenizer with SHA-256 `sha256` counts them, and the characters
    past the count's limit (`rest_chars`, priced per character)."""

    sha256: str
    tokens: int
    rest_chars: int = 0


def count_prompt(count: TokenCount, text: str, max_chars: int, sha256: str) -> PromptCount:
    """`text`'s tokens by `count`, reading at most `max_chars` characters of it."""
    rest = max(0, len(text) - max_chars)
    return PromptCount(sha256, count(text[:max_chars] if rest else text), rest)


def count_parts(count: TokenCount, parts: PromptParts, tokenizer: AliasTokenizer) -> PromptCount:
    """A body's tokens on the engine: its parts by `count`, reading at most the alias's
    `max_chars` of them, and what the chat template adds to a chat body
    (`TemplateTokens.tokens`: per turn, per prompt, and the tools as it renders them). Without
    a measured template, the text alone (`parts.joined`); a completions prompt adds the
    tokenizer's special tokens per prompt (`TokenizerRef.special_tokens`: the engine adds its
    BOS to each), where the profiler measured them."""
    template, sha256 = tokenizer.template, tokenizer.sha256
    if parts.messages is None:
        counted = count_prompt(count, parts.joined(), tokenizer.max_chars, sha256)
        if not tokenizer.special_tokens:
            return counted
        special = tokenizer.special_tokens * parts.prompts
        return PromptCount(sha256, counted.tokens + special, counted.rest_chars)
    if template is None:
        return count_prompt(count, parts.joined(), tokenizer.max_chars, sha256)
    text = count_prompt(count, parts.text, tokenizer.max_chars, sha256)
    tools = None
    if parts.tools:
        room = max(0, tokenizer.max_chars - len(parts.text))
        tools = count_prompt(count, parts.tools, room, sha256)
    tokens = template.tokens(text.tokens, parts.messages, None if tools is None else tools.tokens)
    rest = text.rest_chars + (0 if tools is None else tools.rest_chars)
    return PromptCount(sha256, tokens, rest)


def counted_chars(counted: PromptCount, tokenizer: AliasTokenizer) -> int:
    """The characters of the one estimate for a count by the alias's tokenizer: each token at
    the alias's largest chars_per_token (so no pair's estimate falls below the count), the
    uncounted rest as it is.

    Rounded down where a token is at least one character: a pair at that largest figure R
    then reads the count back exactly (`input_tokens`: ceil(floor(t x R) / R) = t, as
    floor(t x R) > (t - 1) x R), where rounding up read t + 1 whenever t x R is not whole;
    a pair at a smaller figure reads at least t still. Below one character per token no
    whole number of characters need read back t, so up."""
    chars = counted.tokens * tokenizer.token_chars
    whole = math.floor(chars) if tokenizer.token_chars >= 1.0 else math.ceil(chars)
    return whole + counted.rest_chars


def templated_chars(
    template: TemplateTokens, chars: int, messages: int, tools_chars: int, token_chars: float
) -> int:
    """A chat body priced per character (`chars`, of which `tools_chars` are its tools, both
    weighed as `category.weighed_chars` weighs them) with what the chat template adds
    (`TemplateTokens.added`, as `count_parts` adds it to a count): its `messages` turns, and
    the tools' estimated tokens as the template renders them, in place of their characters;
    each token at `token_chars` characters (the alias's largest chars_per_token, as
    `counted_chars`), rounded up; never below the body without its tools.

    The profiler measures the template against the count, whose texts are joined by
    newlines, a token each (`contracts.prompt_text`): its figures leave out the one the count
    already holds between two turns (Gemma's 5 tokens per turn measure as 4, and its 4 per
    prompt as 5). The characters hold no newline, so the `messages - 1` joins are added as
    tokens here, and the sum is the engine's again."""
    text = chars - tools_chars
    tools = tools_chars / token_chars if tools_chars else None
    added = template.added(messages, tools) + messages - 1
    return max(text, math.ceil(text + added * token_chars))


def special_chars(special_tokens: int, prompts: int, token_chars: float) -> int:
    """The characters a completions body priced per character adds for the special tokens the
    engine adds to each of its `prompts` (`count_parts` adds them as tokens), each token at
    `token_chars` characters (as `counted_chars`), rounded up."""
    return math.ceil(special_tokens * prompts * token_chars)
