"""The text an engine tokenizes for a chat or completions body, as a chat template renders it.

PURE. `prompt_text` joins what a body's template renders (each turn's text, its `tool_calls`,
the `tools`, `documents` and a `response_format` schema as JSON, or a completions `prompt`)
with newlines. The data plane counts it with the served model's tokenizer
(`data_plane.request.prompt_tokens`); the profiler counts the same text to measure what the
template adds around it. docs/data_plane.md, "Prompt size".
"""

from __future__ import annotations

import json
from typing import Any

_RENDERED = ("tools", "documents")  # top-level fields a chat template renders as JSON


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
