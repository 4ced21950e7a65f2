"""The text an engine tokenizes for a chat or completions body, as a chat template renders it.

PURE. `prompt_text` joins what a body's template renders (each turn's text, its `tool_calls`,
the `tools`, `documents` and a `response_format` schema as JSON, or a completions `prompt`)
with newlines; `prompt_parts` keeps the tools apart and counts the turns, for what a chat
template adds around them (`tokenizer_ref.TemplateTokens`), and strips each turn's text as a
template that `trim`s it does. The data plane counts them with
the served model's tokenizer (`data_plane.request.prompt_tokens`); the profiler counts the
same parts to measure what the template adds (`profiler.engine.template_tokens`).
docs/data_plane.md, "Prompt size".
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


def rendered(value: Any) -> str:
    """`value` as a chat template's `tojson` renders it (", " and ": ", characters as is)."""
    return json.dumps(value, ensure_ascii=False)


def _message_texts(message: Any, trim: bool) -> list[str]:
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
    if trim and texts:  # the turn's text parts, joined by newlines, stripped as one
        texts = ["\n".join(texts).strip()]
    calls = message.get("tool_calls")
    if calls:
        texts.append(rendered(calls))
    return texts


@dataclass(frozen=True, slots=True)
class PromptParts:
    """A body's text as `prompt_parts` splits it for a template's count
    (`tokenizer_ref.TemplateTokens`): `text`, every part but the tools, joined by newlines;
    `tools`, the tools' rendered JSON ("" without); `messages`, its chat turns (None: a
    completions prompt, which no template renders); `prompts`, a completions body's prompts
    (0: a chat body), each of which the engine adds its tokenizer's special tokens to
    (`tokenizer_ref.TokenizerRef.special_tokens`)."""

    text: str
    tools: str
    messages: int | None
    prompts: int = 0

    def joined(self) -> str:
        """The text and the tools, joined by a newline: `prompt_text`."""
        if self.text and self.tools:
            return f"{self.text}\n{self.tools}"
        return self.text or self.tools


def prompt_parts(doc: dict[str, Any], trim: bool = False) -> PromptParts:
    """A chat or completions body's parts the engine tokenizes (`prompt_text`'s, the tools
    apart); `trim`: each turn's text stripped of surrounding whitespace, as a template that
    `trim`s it renders it (`TemplateTokens.trims`)."""
    prompt = doc.get("prompt")
    if type(prompt) is str:
        return PromptParts(prompt, "", None, 1)
    if type(prompt) is list:
        prompts = [p for p in prompt if type(p) is str]
        return PromptParts("\n".join(prompts), "", None, len(prompts))
    texts: list[str] = []
    messages = doc.get("messages")
    turns = 0
    if type(messages) is list:
        turns = len(messages)
        for message in messages:
            texts += _message_texts(message, trim)
    documents = doc.get("documents")
    if documents:
        texts.append(rendered(documents))
    fmt = doc.get("response_format")
    if type(fmt) is dict and fmt.get("type") == "json_schema" and fmt.get("json_schema"):
        texts.append(rendered(fmt["json_schema"]))
    tools = doc.get("tools")
    return PromptParts("\n".join(texts), rendered(tools) if tools else "", turns)


def prompt_text(doc: dict[str, Any]) -> str:
    """Every part of a chat or completions body the engine tokenizes, joined by newlines."""
    return prompt_parts(doc).joined()
