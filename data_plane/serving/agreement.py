"""Do two answers agree? The comparison behind shadow re-asks (docs/control_plane.md
"Accuracy drift").

PURE. By category: `math` compares the last number of each answer (numeric); `extraction`
the first JSON object of each (JSON-equal; answers without one fall back to text); `code` the
text with whitespace collapsed (operators matter); every other category the normalised text
(lower case, punctuation dropped, whitespace collapsed).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_PUNCT = re.compile(r"[^\w\s]")
_SPACE = re.compile(r"\s+")


def answer_text(body: bytes) -> str | None:
    """The answer of an OpenAI chat or completions JSON body; None when it has none."""
    try:
        doc = json.loads(body)
        choice = doc["choices"][0]
        text = choice["message"]["content"] if "message" in choice else choice["text"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    return text if isinstance(text, str) else None


def _normalised(text: str) -> str:
    return _SPACE.sub(" ", _PUNCT.sub(" ", text.lower())).strip()


def _last_number(text: str) -> float | None:
    found = _NUMBER.findall(text.replace(",", ""))
    return float(found[-1]) if found else None


def _first_json(text: str) -> Any:
    start = text.find("{")
    while start != -1:
        try:
            return json.JSONDecoder().raw_decode(text[start:])[0]
        except ValueError:
            start = text.find("{", start + 1)
    return None


def answers_agree(category: str, first: str, second: str) -> bool:
    if category == "math":
        a, b = _last_number(first), _last_number(second)
        if a is not None and b is not None:
            return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    elif category == "extraction":
        a_doc, b_doc = _first_json(first), _first_json(second)
        if a_doc is not None and b_doc is not None:
            return bool(a_doc == b_doc)
    elif category == "code":
        return _SPACE.sub(" ", first).strip() == _SPACE.sub(" ", second).strip()
    return _normalised(first) == _normalised(second)
