"""Token usage read back from engine answers, and what it cost (PURE).

The last `"usage"` object of a JSON body, or of the last few SSE events of a stream. A small
answer body with one `"usage"` key is decoded whole by orjson (the usual answer: cheaper than
finding and decoding its tail); anything else has only its tail parsed, so large answers are
never decoded in full for metrics.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from data_plane.domain import CompiledPair, per_request

_USAGE_KEY = b'"usage"'
_DECODER = json.JSONDecoder()
SSE_TAIL_BYTES = 8192  # enough for the final usage chunk plus `[DONE]`
WHOLE_BODY_BYTES = 32 * 1024  # answers up to this size may be decoded whole


@per_request
class Usage:
    input_tokens: int
    output_tokens: int


def _usage_object(value: object) -> Usage | None:
    if not isinstance(value, dict):
        return None
    prompt = value.get("prompt_tokens")
    completion = value.get("completion_tokens", 0)
    if not isinstance(prompt, int) or not isinstance(completion, int):
        return None
    if prompt < 0 or completion < 0 or isinstance(prompt, bool) or isinstance(completion, bool):
        return None
    return Usage(prompt, completion)


def find_usage(data: bytes) -> Usage | None:
    """The last `"usage": {...}` object in `data` (a JSON body or a stream's tail), if any."""
    found = _top_level_usage(data)
    return found if found is not None else _last_usage(data)


def read_usage(data: bytes) -> tuple[Usage | None, dict[str, Any] | None]:
    """`find_usage` of a whole answer body, and the body as decoded when that decoded it
    whole (the usual small answer), else None: the quality guard then judges the answer
    without decoding it a second time (`quality.check_answer`)."""
    doc = _whole(data)
    found = None if doc is None else _usage_object(doc.get("usage"))
    return (found if found is not None else _last_usage(data)), doc


def _whole(data: bytes) -> dict[str, Any] | None:
    """A small JSON object whose only `"usage"` key is its own (then it is also the last
    one), decoded; None when that is not so."""
    if len(data) > WHOLE_BODY_BYTES or data[:1] != b"{" or data.count(_USAGE_KEY) != 1:
        return None
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return doc if type(doc) is dict else None


def _top_level_usage(data: bytes) -> Usage | None:
    """The usage of `_whole(data)`; None when there is none, or when it does not hold a usage
    (the tail search then says what there is)."""
    doc = _whole(data)
    return None if doc is None else _usage_object(doc.get("usage"))


def _last_usage(data: bytes) -> Usage | None:
    """`find_usage` by searching back from the end for `"usage"` and decoding what follows."""
    end = len(data)
    while True:
        at = data.rfind(_USAGE_KEY, 0, end)
        if at < 0:
            return None
        colon = data.find(b":", at + len(_USAGE_KEY))
        if colon >= 0:
            text = data[colon + 1 :].decode("utf-8", errors="replace").lstrip()
            try:
                value, _ = _DECODER.raw_decode(text)
            except ValueError:
                value = None
            usage = _usage_object(value)
            if usage is not None:
                return usage
        end = at  # `"usage": null` in a content chunk; look further back


def cost_usd(pair: CompiledPair, usage: Usage) -> float:
    """What `usage` costs at `pair`'s per-token prices."""
    return (
        usage.input_tokens * pair.input_usd_per_token
        + usage.output_tokens * pair.output_usd_per_token
    )
