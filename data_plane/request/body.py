"""Inbound request bodies: validate the few fields we read, and rewrite `model` byte-for-byte.

PURE. `parse_request_body` validates with pydantic (unknown fields allowed: the proxy is
transparent) and returns only the facts routing needs; `rewrite_model` replaces the value of
the top-level "model" key and leaves every other byte of the body as the client sent it.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator
from itertools import islice
from typing import Annotated, Any, Literal

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictStr,
    ValidationError,
    WithJsonSchema,
    field_validator,
)

from data_plane.domain import per_request
from data_plane.errors import InvalidRequest
from data_plane.request.fields import (
    JSON_FORMATS,
    MAX_MODEL_CHARS,
    MAX_OUTPUT_TOKENS,
    Facts,
    chat_facts,
    completion_facts,
)
from data_plane.request.prompt_size import IMAGE_CHARS, body_chars, message_chars

MAX_DEPTH = 64  # deeper JSON is refused before parsing (a recursion bomb, not a request)
_COLON = re.compile(rb"[ \t\r\n]*:[ \t\r\n]*")
_OPEN = frozenset(b"[{")
_BACKSLASH = ord("\\")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_ONE_KIND = bytes.maketrans(b"{}", b"[]")  # `_nest` counts both kinds alike
_TOO_MANY_OPEN = b"[" * (MAX_DEPTH + 1)
_FAST_BRACKETS = 32_768  # opening brackets (strings included) `_within_depth` takes
_PASS_BYTES = 8  # `_within_depth` reads at most this many times its brackets
PositiveTokens = Annotated[int, Field(strict=True, gt=0, le=MAX_OUTPUT_TOKENS)]
BodyKind = Literal["chat", "completions"]
# What the validators below accept, as JSON Schema (the served /openapi.json is generated
# from these models).
_TEXT_PART = {
    "type": "object",
    "required": ["type"],
    "properties": {"type": {"type": "string"}, "text": {"type": "string"}},
}
_CONTENT_SCHEMA = {
    "anyOf": [{"type": "string"}, {"type": "null"}, {"type": "array", "items": _TEXT_PART}]
}
_FORMAT_SCHEMA = {
    "anyOf": [
        {"type": "object", "required": ["type"], "properties": {"type": {"type": "string"}}},
        {"type": "null"},
    ]
}
_PROMPT_SCHEMA = {
    "anyOf": [
        {"type": "string"},
        {"type": "array", "items": {"type": "string"}, "minItems": 1},
    ]
}


@per_request
class ParsedBody:
    """The facts routing needs from a body. `classify_text` is the last user turn only (a long
    system prompt must not make every request look hard); `input_chars` counts every part the
    engine tokenizes (`prompt_size`: every turn's text, tools, tool calls, images, ...), and
    `json_chars` the part of it rendered as JSON, which a family may price at its own
    characters per token, and `images` its image parts, which the table may price at the
    model's own tokens per image (`category.request_facts`); `messages` its chat turns (0: a
    completions prompt) and `tools_chars` the part of `json_chars` that is `tools`, for what
    the chat template adds (`prompt_tokens.templated_chars`); `prompts` a completions body's
    prompts, for the special tokens the engine adds to each (`prompt_tokens.special_chars`)."""

    alias: str
    stream: bool
    max_output_tokens: int | None
    wants_json: bool
    classify_text: str
    input_chars: int
    json_chars: int = 0
    images: int = 0  # image parts, each IMAGE_CHARS of `input_chars` (`prompt_size`)
    messages: int = 0  # chat turns (0: a completions prompt, which no template renders)
    tools_chars: int = 0  # the `tools` part of `json_chars`
    prompts: int = 0  # a completions body's prompts (0: a chat body)


def _text_of(content: Any) -> str:
    """Text of a message content: the string, or its text parts joined (images are counted by
    `prompt_size`)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p["text"] for p in content if p.get("type") == "text")
    return ""


def _check_parts(value: Any) -> Any:
    for i, part in enumerate(value):
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise ValueError(f"part [{i}] must be an object with a string 'type'")
        if part["type"] == "text" and not isinstance(part.get("text"), str):
            raise ValueError(f"part [{i}] is a text part without a string 'text'")
    return value


class _Message(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: StrictStr
    content: Annotated[Any, WithJsonSchema(_CONTENT_SCHEMA)] = None

    @field_validator("content")
    @classmethod
    def _content(cls, value: Any) -> Any:
        if value is None or isinstance(value, str):
            return value
        if isinstance(value, list):
            return _check_parts(value)
        raise ValueError("must be a string, a list of content parts, or null")


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: StrictStr = Field(min_length=1, max_length=MAX_MODEL_CHARS)
    stream: StrictBool | None = None
    max_tokens: PositiveTokens | None = None
    max_completion_tokens: PositiveTokens | None = None
    response_format: Annotated[Any, WithJsonSchema(_FORMAT_SCHEMA)] = None

    @field_validator("response_format")
    @classmethod
    def _format(cls, value: Any) -> Any:
        if value is not None and not (
            isinstance(value, dict) and isinstance(value.get("type"), str)
        ):
            raise ValueError("must be an object with a string 'type'")
        return value


class _ChatBody(_Body):
    messages: list[_Message] = Field(min_length=1)


class _CompletionBody(_Body):
    prompt: Annotated[Any, WithJsonSchema(_PROMPT_SCHEMA)]

    @field_validator("prompt")
    @classmethod
    def _prompt(cls, value: Any) -> Any:
        if isinstance(value, str):
            return value
        if isinstance(value, list) and value and all(isinstance(p, str) for p in value):
            return value
        raise ValueError("must be a string or a non-empty list of strings")


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)  # stateless, made once


def _too_deep() -> InvalidRequest:
    return InvalidRequest(f"JSON nesting is deeper than {MAX_DEPTH} levels", code="invalid_json")


def _nest(segment: bytes, depth: int) -> int:
    """Depth after the bytes between two strings; raises past MAX_DEPTH at any point."""
    for ch in segment.translate(None, _NOT_BRACKETS):
        depth += 1 if ch in _OPEN else -1
        if depth > MAX_DEPTH:
            raise _too_deep()
    return depth


def _strings(raw: bytes) -> Iterator[tuple[int, int, int]]:
    """(depth, start, end) of every JSON string token, depth being the nesting it sits at.

    A scanner over raw bytes: quotes are found with bytes.find (memchr speed), an escaped
    quote is one preceded by an odd run of backslashes, and brackets are counted only in the
    short stretches between strings. Past MAX_DEPTH it raises InvalidRequest.
    """
    find = raw.find
    pos, depth = 0, 0
    while (start := find(b'"', pos)) >= 0:
        depth = _nest(raw[pos:start], depth)
        end = find(b'"', start + 1)
        while end > 0:
            k = end
            while raw[k - 1] == _BACKSLASH:
                k -= 1
            if (end - k) % 2 == 0:
                break
            end = find(b'"', end + 1)
        if end < 0:
            return  # unterminated string: not JSON, nothing more to find
        yield depth, start, end + 1
        pos = end + 1
    _nest(raw[pos:], depth)


def _within_depth(raw: bytes) -> bool:
    """True when the body's brackets outside strings, counted as `_nest` counts them (any
    opening one +1, any closing one -1), close every level they open and never go deeper than
    MAX_DEPTH; found in C: the strings cut out (the same tokens `_strings` finds), the brackets
    kept as one kind, then one innermost level of pairs removed per pass. False is not a
    verdict (too deep, unbalanced, an unterminated string): `_strings` decides then."""
    # With no backslash before a quote every quote bounds a string: the even pieces between
    # quotes are the text outside strings (bytes.split, several times faster than the regex).
    outside = _STRING.sub(b"", raw) if b'\\"' in raw else b"".join(raw.split(b'"')[::2])
    brackets = outside.translate(_ONE_KIND, _NOT_BRACKETS)
    if _TOO_MANY_OPEN in brackets:
        return False  # a run of opening brackets past MAX_DEPTH: the scanner stops at once
    budget = _PASS_BYTES * len(brackets)  # past it, deep nests: the scanner is as quick
    for _ in range(MAX_DEPTH):
        if not brackets:
            return True
        budget -= len(brackets)
        inner = brackets.replace(b"[]", b"")  # replace does not rescan what it joined
        if len(inner) == len(brackets) or budget < 0:
            return False  # unbalanced, or deep over much of the body
        brackets = inner
    return not brackets


def _check_depth(raw: bytes) -> None:
    """Raise when nested deeper than MAX_DEPTH, before the JSON decoder recurses into it. With
    at most MAX_DEPTH opening brackets in the whole body (strings included) it cannot be. With
    at most _FAST_BRACKETS, `_within_depth` clears it first (its passes read at most
    _PASS_BYTES x its brackets, so no body costs much more than the scanner did before): the
    per-string scanner alone, in Python, held the event loop 4.7 ms for 126 KB of `tools` (0.8
    ms now; docs/benchmarks.md, section 7, "Engine rows")."""
    opening = raw.count(b"[") + raw.count(b"{")
    if opening > MAX_DEPTH and not (opening <= _FAST_BRACKETS and _within_depth(raw)):
        for _ in _strings(raw):
            pass


def _load(raw: bytes) -> dict[str, Any]:
    if not raw or raw.isspace():
        raise InvalidRequest(
            "the request body is empty; expected a JSON object", code="invalid_json"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InvalidRequest(
            f"the request body is not valid UTF-8 (byte {err.start})", code="invalid_json"
        ) from err
    _check_depth(raw)
    try:
        if text.startswith("\ufeff"):  # json.loads says so too; the decoder does not check
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
        doc = _DECODER.decode(text)
    except ValueError as err:
        raise InvalidRequest(
            f"the request body is not valid JSON: {err}", code="invalid_json"
        ) from err
    if not isinstance(doc, dict):
        raise InvalidRequest(
            f"the request body must be a JSON object, not {type(doc).__name__}",
            code="invalid_json",
        )
    return doc


def _validate(doc: dict[str, Any], kind: BodyKind) -> _ChatBody | _CompletionBody:
    model = _ChatBody if kind == "chat" else _CompletionBody
    try:
        return model.model_validate(doc)
    except ValidationError as err:
        first = err.errors()[0]
        path = _path(tuple(first["loc"]))
        message = first["msg"].removeprefix("Value error, ")
        raise InvalidRequest(f"{path or 'body'}: {message}", param=path or None) from err


def kind_of(doc: dict[str, Any]) -> BodyKind:
    """The kind of a body that may be either (`/v1/route` takes both): completions when it
    has a prompt and no messages, else chat."""
    return "completions" if "messages" not in doc and "prompt" in doc else "chat"


def parse_request_body(raw: bytes, kind: BodyKind | Literal["either"]) -> ParsedBody:
    """Validate a chat or completions body ("either": whichever `kind_of` finds); raise
    InvalidRequest naming the field path (`code` invalid_json for undecodable bodies,
    invalid_field for bad fields).

    The common valid body is read by `fields` (a dict walk); pydantic judges the
    rest, so it words every error."""
    facts = _fast_facts(raw, kind)
    if facts is not None:
        return ParsedBody(*facts)
    doc = _load(raw)
    known = kind_of(doc) if kind == "either" else kind
    facts = chat_facts(doc) if known == "chat" else completion_facts(doc)
    if facts is not None:
        return ParsedBody(*facts)
    return validated_facts(doc, known)


def _fast_facts(raw: bytes, kind: BodyKind | Literal["either"]) -> Facts | None:
    """The facts of a valid body decoded by orjson (several times faster than `json`), or
    None: then the standard decoder and pydantic judge it and word any error.

    orjson accepts a subset of what `_load` accepts (it refuses NaN and Infinity, numbers
    beyond a double, lone surrogates and a BOM, all of which `_load` words or takes) and
    decodes it to the same values, except integers beyond 64 bits, which it makes floats;
    the facts refuse a float where they read an integer, so such a body takes the slow path
    too. The depth limit is checked first, as on the slow path."""
    _check_depth(raw)
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if type(doc) is not dict:
        return None
    if kind == "either":
        kind = kind_of(doc)
    return chat_facts(doc) if kind == "chat" else completion_facts(doc)


def validated_facts(doc: dict[str, Any], kind: BodyKind) -> ParsedBody:
    """The facts of a decoded body, validated by pydantic (raises InvalidRequest)."""
    body = _validate(doc, kind)
    extra = schema = images = messages = tools = prompts = 0
    if isinstance(body, _ChatBody):
        texts = [_text_of(m.content) for m in body.messages]
        users = [i for i, m in enumerate(body.messages) if m.role == "user"]
        classify_text = texts[users[-1]] if users else ""
        added = [message_chars(m) for m in doc["messages"]]
        rendered, tools = body_chars(doc)
        schema = rendered + sum(calls for calls, _ in added)
        messages = len(body.messages)
        images = sum(parts for _, parts in added)
        extra = schema + images * IMAGE_CHARS
    else:
        texts = [body.prompt] if isinstance(body.prompt, str) else list(body.prompt)
        classify_text = "\n".join(texts)
        prompts = len(texts)
    fmt = body.response_format
    return ParsedBody(
        alias=body.model,
        stream=bool(body.stream),
        max_output_tokens=body.max_completion_tokens or body.max_tokens,
        wants_json=fmt is not None and fmt["type"] in JSON_FORMATS,
        classify_text=classify_text,
        input_chars=sum(len(t) for t in texts) + extra,
        json_chars=schema,
        images=images,
        messages=messages,
        tools_chars=tools,
        prompts=prompts,
    )


# A JSON string that decodes to "model" (each letter as itself or as a \u escape), then a colon.
_MODEL_KEY = re.compile(
    rb'"(?:m|\\u006[dD])(?:o|\\u006[fF])(?:d|\\u0064)(?:e|\\u0065)(?:l|\\u006[cC])"'
    rb"[ \t\r\n]*:[ \t\r\n]*"
)
# A complete JSON string token: a quote escaped by a backslash does not end it.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_MAX_KEY_CANDIDATES = 4  # beyond, the linear scanner (each candidate costs a prefix pass)


def _top_level(raw: bytes, at: int) -> bool:
    """Is offset `at` outside every string, directly inside the top-level object? With the
    complete strings before it removed, an unclosed one leaves its opening quote behind."""
    outside = raw[:at]
    if b'"' in outside:  # strings before it (the usual `{"model"` first has none)
        outside = _STRING.sub(b"", outside)
        if b'"' in outside:
            return False
    opened = outside.count(b"{") + outside.count(b"[")
    return opened - outside.count(b"}") - outside.count(b"]") == 1


def _model_keys(raw: bytes) -> list[re.Match[bytes]]:
    """Up to _MAX_KEY_CANDIDATES + 1 `"model" :` in `raw` (strings included). Without a
    backslash-u006 escape in the body the key can only be spelled plainly: memchr-speed
    `find`s, then one match each."""
    if b"\\u006" in raw:
        return list(islice(_MODEL_KEY.finditer(raw), _MAX_KEY_CANDIDATES + 1))
    keys: list[re.Match[bytes]] = []
    at = raw.find(b'"model"')
    while at >= 0 and len(keys) <= _MAX_KEY_CANDIDATES:
        key = _MODEL_KEY.match(raw, at)
        if key is not None:
            keys.append(key)
        at = raw.find(b'"model"', at + 7)
    return keys


def _model_value_spans(raw: bytes, validated: bool = False) -> list[tuple[int, int]]:
    """Byte spans of the values of every top-level "model" key (JSON keeps the last one; we
    rewrite all, so no reader sees the client's value whichever duplicate it keeps).

    Search for keys spelled "model", each checked to be a real top-level key; the linear
    scanner when there are many such keys. Nesting depth is `parse_request_body`'s check:
    bodies reach here after it. `validated`: `raw` is known to be an object with a top-level
    "model" key; every such key is among the ones found, so when only one is found it is that
    key, and its depth need not be checked (the check reads every string before it)."""
    keys = _model_keys(raw)
    if len(keys) > _MAX_KEY_CANDIDATES:
        return _scanned_model_value_spans(raw)
    only = validated and len(keys) == 1
    spans: list[tuple[int, int]] = []
    for key in keys:
        if only or _top_level(raw, key.start()):
            value = _STRING.match(raw, key.end())
            if value is None:
                raise InvalidRequest("model: must be a string", param="model")
            spans.append(value.span())
    return spans


def _scanned_model_value_spans(raw: bytes) -> list[tuple[int, int]]:
    """`_model_value_spans` by one pass over every string token of the body."""
    spans: list[tuple[int, int]] = []
    value_at = -1  # where the value of a top-level "model" key starts, while one is pending
    for depth, start, end in _strings(raw):
        if value_at >= 0:
            if start != value_at:
                break  # the value was not a string
            spans.append((start, end))
            value_at = -1
            continue
        if depth != 1:
            continue
        colon = _COLON.match(raw, end)
        if colon is not None and json.loads(raw[start:end]) == "model":
            value_at = colon.end()
    if value_at >= 0:
        raise InvalidRequest("model: must be a string", param="model")
    return spans


@functools.lru_cache(maxsize=1024)  # served model names: a table's few dozen
def _json_string(text: str) -> bytes:
    return json.dumps(text, ensure_ascii=False).encode("utf-8")


def rewrite_model(raw: bytes, served_model_name: str, validated: bool = False) -> bytes:
    """`raw` with the top-level "model" value replaced by `served_model_name` (JSON-encoded);
    every byte outside that value is unchanged. Raises InvalidRequest when there is none.
    `validated`: `parse_request_body` accepted `raw` (so it has a top-level "model")."""
    spans = _model_value_spans(raw, validated)
    if not spans:
        raise InvalidRequest("model: field required", param="model")
    new = _json_string(served_model_name)
    out: list[bytes] = []
    pos = 0
    for start, end in spans:
        out += (raw[pos:start], new)
        pos = end
    out.append(raw[pos:])
    return b"".join(out)


# The request bodies by their name in the OpenAPI document (data_plane.serving.openapi).
REQUEST_MODELS: dict[str, type[BaseModel]] = {
    "ChatRequest": _ChatBody,
    "CompletionRequest": _CompletionBody,
}
