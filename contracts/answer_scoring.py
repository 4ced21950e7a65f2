"""Scorers: does a model's answer match the expected one? exact | contains | regex | numeric | json.

Shared by the profiler (eval items) and the data plane (accuracy checks, `agreement.py`).

PURE: stdlib only. Answers are completion-style continuations ("The capital of France is" ->
" Paris. It is...") or chat answers that work towards a result, so each scorer looks for the
answer at the start of, or inside, the text; the numeric scorer reads the final answer by the
rule of `final_answer` (docs/profiler.md, "Eval sets").
"""

from __future__ import annotations

import json
import math
import re
from enum import StrEnum
from typing import Any, NamedTuple

_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|[-+]?\.\d+")
_N = _NUMBER.pattern
# Final-answer markers, strongest first: the number right after the last one of the strongest
# kind present is the answer.
_MARKERS = (
    re.compile(r"\\boxed\{\s*\$?(" + _N + r")"),
    re.compile(r"####\s*\$?(" + _N + r")"),
    re.compile(r"answer\s*(?:is|:|=|would be|will be)\s*[:=]?\s*\**\s*\$?(" + _N + r")", re.I),
)
_EQUALS = re.compile(r"=\s*\$?(" + _N + r")")
# A first line that is only a number (a completion's continuation, or an answer put first).
_LEAD = re.compile(r"\s*\$?(" + _N + r")\s*%?\s*[.!]?\s*(?:\n|$)")
# What trails the answer as a check of it: parenthetical groups at the end, or a last sentence
# or line that starts with check/verify/verification/proof.
_TRAILING_PARENS = re.compile(r"\s*\([^()]*\)\s*[.!]?\s*$")
_TRAILING_CHECK = re.compile(
    r"(?:(?<=[.!?])\s+|\n\s*)(?:sanity\s+)?(?:check|checking|verify|verification|proof)\b[^\n]*$",
    re.I,
)


class Scorer(StrEnum):
    EXACT = "exact"  # first non-empty line, trimmed (and a trailing '.' dropped) == expected
    CONTAINS = "contains"  # expected occurs in the answer, case-insensitively
    REGEX = "regex"  # re.search(expected, answer)
    NUMERIC = "numeric"  # the answer's final number (`final_answer`) is within `tolerance`
    JSON = "json"  # the first JSON object in the answer has every expected key and value


def first_line(answer: str) -> str:
    """The first non-empty line, trimmed, without one trailing period."""
    for line in answer.splitlines():
        stripped = line.strip()
        if stripped:
            return stripped.removesuffix(".").rstrip()
    return ""


def first_number(answer: str) -> float | None:
    """The first decimal number in `answer` (thousands separators allowed), or None."""
    match = _NUMBER.search(answer)
    if match is None:
        return None
    return float(match.group().replace(",", ""))


class FinalAnswer(NamedTuple):
    """The number `final_answer` read, and whether the text states it as its answer (a
    marker, a first line of its own, an `=` before it, or the only number) rather than
    leaving it to be the last of several."""

    value: float
    stated: bool


def _to_float(text: str) -> float:
    return float(text.replace(",", ""))


def without_trailing_check(answer: str) -> str:
    """`answer` without what trails its answer as a check: parenthetical groups at its end
    ("(Check: 6*7)") and a last sentence or line starting with check/verify/proof."""
    text = answer.rstrip()
    while True:
        cut = _TRAILING_CHECK.sub("", _TRAILING_PARENS.sub("", text)).rstrip()
        if cut == text:
            return text
        text = cut


def final_answer(answer: str) -> FinalAnswer | None:
    """The final answer's number in `answer`, by this rule (first that applies), over the
    text without a trailing check (`without_trailing_check`; the whole text if no number is
    left):

    1. the number after the last explicit marker, strongest kind first: `\\boxed{N}`,
       `#### N`, `answer is N` / `answer: N` / `answer = N`;
    2. a first line that is only a number (a completion's continuation, " 19\n12 + 8 = 20",
       or an answer put first);
    3. the number after the last `=` ("12 + 7 = 19");
    4. the last number.

    None when there is no number at all.
    """
    text = without_trailing_check(answer)
    if _NUMBER.search(text) is None:
        text = answer
    for marker in _MARKERS:
        found = marker.findall(text)
        if found:
            return FinalAnswer(_to_float(found[-1]), True)
    lead = _LEAD.match(text)
    if lead is not None:
        return FinalAnswer(_to_float(lead.group(1)), True)
    equals = _EQUALS.findall(text)
    if equals:
        return FinalAnswer(_to_float(equals[-1]), True)
    every = _NUMBER.findall(text)
    if not every:
        return None
    return FinalAnswer(_to_float(every[-1]), len(every) == 1)


def first_json_object(answer: str) -> dict[str, Any] | None:
    """The first JSON object that parses, starting at any '{' in the answer; None if none."""
    decoder = json.JSONDecoder()
    for start in (i for i, ch in enumerate(answer) if ch == "{"):
        try:
            value, _ = decoder.raw_decode(answer, start)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    return None


def _json_matches(found: Any, expected: Any) -> bool:
    """Every key of `expected` is in `found` with an equal value (recursively for objects;
    numbers compare by value, so 30 == 30.0)."""
    if isinstance(expected, dict):
        return isinstance(found, dict) and all(
            k in found and _json_matches(found[k], v) for k, v in expected.items()
        )
    if isinstance(expected, bool) or isinstance(found, bool):
        return found is expected
    if isinstance(expected, int | float) and isinstance(found, int | float):
        return math.isclose(found, expected, rel_tol=0.0, abs_tol=1e-9)
    return bool(found == expected)


def score(answer: str, expected: Any, scorer: Scorer, tolerance: float = 0.0) -> bool:
    """True when `answer` is right. `expected` has the shape the scorer needs (validated when
    the eval set is parsed): str for exact/contains/regex, a number for numeric, an object for
    json. `tolerance` is absolute and applies to numeric only."""
    match scorer:
        case Scorer.EXACT:
            return first_line(answer) == str(expected).strip()
        case Scorer.CONTAINS:
            return str(expected).casefold() in answer.casefold()
        case Scorer.REGEX:
            return re.search(str(expected), answer) is not None
        case Scorer.NUMERIC:
            final = final_answer(answer)
            return final is not None and abs(final.value - float(expected)) <= tolerance + 1e-9
        case Scorer.JSON:
            found = first_json_object(answer)
            return found is not None and _json_matches(found, expected)
