"""Does a pair's answer give its reference pair's answer? The comparison behind accuracy
checks (docs/accuracy.md "Live checks").

PURE. Only where the category's scorer decides, with the profiler's scorers
(`contracts.answer_scoring`), taking the reference's answer as the expected one:

- `math`: the numeric scorer, on both answers' final numbers by the profiler's own rule
  (`contracts.answer_scoring.final_answer`: a `\\boxed{}`, `####` or "answer is" marker, else
  a first line that is only a number, else the number after the last `=`, else the last
  number; a trailing "(Check: 6*7)" is not the answer). The reference's answer must state its
  number (a marker, a line of its own, an `=`, or its only number; else there is no one answer
  to expect: undecided); the pair agrees when its final number is that one, and disagrees when
  it has none.
- `extraction`: the json scorer, both ways (the two first JSON objects hold the same keys and
  values); undecided when the reference's answer has no JSON object.

Every other category is free text (chat, code, reasoning): two right answers may share no
words, and no judge we could defend decides them, so they are not checked at all (`None`).
"""

from __future__ import annotations

import json
from collections.abc import Callable

from contracts.answer_scoring import Scorer, final_answer, first_json_object, score


def answer_text(body: bytes) -> str | None:
    """The answer of an OpenAI chat or completions JSON body; None when it has none."""
    try:
        doc = json.loads(body)
        choice = doc["choices"][0]
        text = choice["message"]["content"] if "message" in choice else choice["text"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    return text if isinstance(text, str) else None


def _numeric(answer: str, reference: str) -> bool | None:
    expected = final_answer(reference)
    if expected is None or not expected.stated:
        return None
    return score(answer, expected.value, Scorer.NUMERIC)


def _json(answer: str, reference: str) -> bool | None:
    expected = first_json_object(reference)
    if expected is None:
        return None
    found = first_json_object(answer)
    return (
        found is not None
        and score(answer, expected, Scorer.JSON)
        and score(reference, found, Scorer.JSON)
    )


_DECIDERS: dict[str, Callable[[str, str], bool | None]] = {"math": _numeric, "extraction": _json}


def checked(category: str) -> bool:
    """True for the categories whose scorer can decide an answer (worth a re-ask)."""
    return category in _DECIDERS


def verdict(category: str, answer: str, reference: str) -> bool | None:
    """True when `answer` gives `reference`'s answer, False when it does not, None when the
    category's scorer cannot say (free text, or a reference answer it cannot read)."""
    decide = _DECIDERS.get(category)
    return None if decide is None else decide(answer, reference)
