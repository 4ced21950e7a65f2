"""The request an accuracy check sends: the client's, asked the way the profiles were measured.

PURE. Whatever the client asked, a check's re-ask is greedy (`temperature` 0), one answer (`n`
1, no `best_of`), not streamed, and at most the policy's `max_tokens` (the client's own limit
when smaller): the comparison then measures the pairs, not the client's sampling, and one
client's `max_tokens: 32000, n: 8` cannot make a check dear. `reusable` says whether the
client's own request already was such a request, so its served answer can stand for the
checked pair's (else the checked pair is re-asked too, with the same body).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

_DROPPED = ("best_of", "stream_options", "logprobs", "top_logprobs", "max_completion_tokens")


@dataclass(frozen=True, slots=True)
class Reask:
    body: dict[str, Any]  # without `model`: each pair's served name goes in on sending
    max_tokens: int
    reusable: bool  # the client's request was already greedy, n 1, within the cap

    def for_model(self, served_model_name: str) -> bytes:
        return orjson.dumps({**self.body, "model": served_model_name})


def _number_is(value: Any, expected: int) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value == expected


def _client_limit(doc: dict[str, Any]) -> int | None:
    for name in ("max_completion_tokens", "max_tokens"):
        value = doc.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def reask(body: bytes, cap: int) -> Reask | None:
    """The re-ask of the client's JSON `body`; None when it is not a JSON object."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(doc, dict):
        return None
    limit = _client_limit(doc)
    max_tokens = cap if limit is None else min(limit, cap)
    reusable = (
        _number_is(doc.get("temperature"), 0)
        and _number_is(doc.get("n", 1), 1)
        and _number_is(doc.get("best_of", 1), 1)
        and limit is not None
        and limit <= cap
    )
    out = {k: v for k, v in doc.items() if k not in _DROPPED and k != "model"}
    out.update(temperature=0.0, n=1, stream=False, max_tokens=max_tokens)
    return Reask(out, max_tokens, reusable)
