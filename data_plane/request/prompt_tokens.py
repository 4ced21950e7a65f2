"""The text an engine tokenizes, for a count by the served model's own tokenizer.

PURE. `count_prompt` counts the tokens of `contracts.prompt_text`'s text (what a body's
template renders: each turn's text, its `tool_calls`, the `tools`, `documents` and a
`response_format` schema as JSON, or a completions `prompt`, joined by newlines) with a
counter handed in (the tokenizer the table names for the alias, `data_plane.prompt_counter`),
reading at most the alias's
`max_chars` (a longer prompt is refused by its context whatever its count; the rest is priced
per character). `counted_chars` turns a count into the one estimate's characters
(`category.weighed_chars`). Image parts stay priced at the model's tokens per image.
Not counted: the template's own text (role headers, a few tokens per turn). docs/data_plane.md,
"Prompt size".
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

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


def counted_chars(counted: PromptCount, tokenizer: AliasTokenizer) -> int:
    """The characters of the one estimate for a count by the alias's tokenizer: each token at
    the alias's largest chars_per_token (so no pair's estimate falls below the count), the
    uncounted rest as it is."""
    return math.ceil(counted.tokens * tokenizer.token_chars) + counted.rest_chars
