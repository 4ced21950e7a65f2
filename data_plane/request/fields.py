"""The fields we read from a decoded body, checked by hand for the common, valid case.

PURE. Accepts exactly a subset of what `body`'s pydantic models accept (same types,
same bounds, strict: no coercion) and reads the same facts from it. Anything else returns
None, and pydantic judges the body, so every error keeps pydantic's wording and field path.
Pydantic costs more per request than the routing decision; this is a dict walk.
"""

from __future__ import annotations

from typing import Any

from data_plane.request.prompt_size import IMAGE_CHARS, body_chars, message_chars

MAX_OUTPUT_TOKENS = 2**31 - 1
JSON_FORMATS = frozenset({"json_object", "json_schema"})
MAX_MODEL_CHARS = 256

# (alias, stream, max_output_tokens, wants_json, classify_text, input_chars, json_chars,
# images, messages, tools_chars, prompts): input_chars is every part the engine tokenizes
# (`prompt_size`), json_chars the part of it rendered as JSON (tools, tool calls, documents, a
# response_format schema), images the image parts (each IMAGE_CHARS of input_chars until the
# table's figure prices it), messages the chat turns (0: a completions prompt), tools_chars
# the part of json_chars that is `tools` (for the chat template's figures), prompts a
# completions body's prompts (0: a chat body; the engine adds its special tokens to each)
Facts = tuple[str, bool, int | None, bool, str, int, int, int, int, int, int]


def _tokens(value: Any) -> bool:
    """A valid max_tokens / max_completion_tokens: absent, null, or a strict int in range."""
    return value is None or (type(value) is int and 0 < value <= MAX_OUTPUT_TOKENS)


def _common(doc: dict[str, Any]) -> tuple[str, bool, int | None, bool] | None:
    """(alias, stream, max output tokens, wants JSON) when every common field is valid."""
    model = doc.get("model")
    if type(model) is not str or not 0 < len(model) <= MAX_MODEL_CHARS:
        return None
    stream = doc.get("stream")
    completion_tokens, tokens = doc.get("max_completion_tokens"), doc.get("max_tokens")
    if not (stream is None or type(stream) is bool) or not _tokens(tokens):
        return None
    fmt = doc.get("response_format")
    if not _tokens(completion_tokens) or not (
        fmt is None or (type(fmt) is dict and type(fmt.get("type")) is str)
    ):
        return None
    wants_json = fmt is not None and fmt["type"] in JSON_FORMATS
    return model, bool(stream), completion_tokens or tokens, wants_json


def _text(content: Any) -> str | None:
    """Text of a valid message content (None when pydantic must judge it)."""
    if content is None:
        return ""
    if type(content) is str:
        return content
    if type(content) is not list:
        return None
    texts = []
    for part in content:
        if type(part) is not dict or type(part.get("type")) is not str:
            return None
        if part["type"] == "text":
            text = part.get("text")
            if type(text) is not str:
                return None
            texts.append(text)
    return "\n".join(texts)


def chat_facts(doc: dict[str, Any]) -> Facts | None:
    """A chat body's facts: the last user turn is classified, every part the engine tokenizes
    is counted (every turn's text, and what `prompt_size` adds)."""
    common = _common(doc)
    messages = doc.get("messages")
    if common is None or type(messages) is not list or not messages:
        return None
    chars = schema = images = 0
    last_user = ""
    for message in messages:
        if type(message) is not dict:
            return None
        role, content = message.get("role"), message.get("content")
        text = _text(content)
        if type(role) is not str or text is None:
            return None
        chars += len(text)
        if type(content) is list or "tool_calls" in message:  # a plain turn adds nothing
            calls, parts = message_chars(message)
            chars += calls + parts * IMAGE_CHARS
            schema += calls
            images += parts
        if role == "user":
            last_user = text
    body, tools = body_chars(doc)
    return (*common, last_user, chars + body, schema + body, images, len(messages), tools, 0)


def completion_facts(doc: dict[str, Any]) -> Facts | None:
    """A completions body's facts: the prompt (or prompts, joined) is classified."""
    common = _common(doc)
    prompt = doc.get("prompt")
    if common is None:
        return None
    if type(prompt) is str:
        return (*common, prompt, len(prompt), 0, 0, 0, 0, 1)
    if type(prompt) is not list or not prompt or any(type(p) is not str for p in prompt):
        return None
    return (*common, "\n".join(prompt), sum(map(len, prompt)), 0, 0, 0, 0, len(prompt))
