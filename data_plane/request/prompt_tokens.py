"""The text an engine tokenizes, for a count by the served model's own tokenizer.

PURE. `prompt_text` joins what a body's template renders (each turn's text, its `tool_calls`,
the `tools`, `documents` and a `response_format` schema as JSON, or a completions `prompt`)
with newlines; `count_prompt` counts its tokens with a counter handed in (the tokenizer the
table names for the alias, `data_plane.prompt_counter`), reading at most the alias's
`max_chars` (a longer prompt is refused by its context whatever its count; the rest is priced
per character). `counted_chars` turns a count into the one estimate's characters
(`category.weighed_chars`). Image parts stay priced at the model's tokens per image.
Not counted: the template's own text (role headers, a few tokens per turn). docs/data_plane.md,
"Prompt size".
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from data_plane.domain import AliasTokenizer

# Counts the tokens of one text (no special tokens): the loaded tokenizer, or a test's own.
TokenCount = Callable[[str], int]
_RENDERED = ("tools", "documents")  # top-level fields a chat template renders as JSON


@dataclass(frozen=True, slots=True)
class PromptCount:
    """A body's tokens as the tokenizer with SHA-256 `sha256` counts them, and the characters
    past the count's limit (`rest_chars`, priced per character)."""

    sha256: str
    tokens: int
    rest_chars: int = 0


def rendered(value: Any) -> str:
    """`value` as a chat template's `tojson` renders it (", " and ": ", characters as is)."""
    return json.dumps(value, ensure_ascii=False)


def _message_texts(message: Any) -> list[str]:
    if type(message) is not dict:
        return []
    texts: list[str] = []
    content = message.get("content")
    if type(content) is str:
        texts.append(content)
    elif type(content) is list:
        for part in content:
            if type(part) is dict and part.get("type") == "text" and type(part.get("text")) is str:
                texts.append(part["text"])
    calls = message.get("tool_calls")
    if calls:
        texts.append(rendered(calls))
    return texts


def prompt_text(doc: dict[str, Any]) -> str:
    """Every part of a chat or completions body the engine tokenizes, joined by newlines."""
    prompt = doc.get("prompt")
    if type(prompt) is str:
        return prompt
    if type(prompt) is list:
        return "\n".join(p for p in prompt if type(p) is str)
    texts: list[str] = []
    messages = doc.get("messages")
    if type(messages) is list:
        for message in messages:
            texts += _message_texts(message)
    for name in _RENDERED:
        value = doc.get(name)
        if value:
            texts.append(rendered(value))
    fmt = doc.get("response_format")
    if type(fmt) is dict and fmt.get("type") == "json_schema" and fmt.get("json_schema"):
        texts.append(rendered(fmt["json_schema"]))
    return "\n".join(texts)


def count_prompt(count: TokenCount, text: str, max_chars: int, sha256: str) -> PromptCount:
    """`text`'s tokens by `count`, reading at most `max_chars` characters of it."""
    rest = max(0, len(text) - max_chars)
    return PromptCount(sha256, count(text[:max_chars] if rest else text), rest)


def counted_chars(counted: PromptCount, tokenizer: AliasTokenizer) -> int:
    """The characters of the one estimate for a count by the alias's tokenizer: each token at
    the alias's largest chars_per_token (so no pair's estimate falls below the count), the
    uncounted rest as it is."""
    return math.ceil(counted.tokens * tokenizer.token_chars) + counted.rest_chars
