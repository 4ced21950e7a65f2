"""Eval sets and accuracy: parse JSONL eval items, summarize scored answers per category.

PURE: no file or network I/O (callers hand in text and bytes). An eval line that does not parse
is reported as `file:line: field: problem`; every bad line is listed, not only the first.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from contracts.answer_scoring import Scorer, score
from contracts.category_model import LabelledPrompt, prompt_window
from contracts.code_tests import Scoring, check_tests
from contracts.names import Category
from contracts.profile_report import CategoryAccuracy
from profiler.stats import wilson_interval


class Message(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    role: Literal["system", "user", "assistant"]
    content: str


class EvalItem(BaseModel):
    """One eval line. Exactly one of `prompt` (sent to /v1/completions) or `messages`
    (/v1/chat/completions). `answer`, when given, is a sample right answer that the scorer
    must accept: it documents the item and catches a wrong `expected` at load time. `tests`,
    when given (code items), is Python source (asserts) that decides the item instead of the
    text scorer (`contracts.code_tests`); it must compile, and is not run here."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str | int | None = None
    prompt: str | None = Field(default=None, min_length=1)
    messages: tuple[Message, ...] | None = Field(default=None, min_length=1)
    expected: Any
    category: Category
    scorer: Scorer
    tolerance: float = Field(default=0.0, ge=0.0, allow_inf_nan=False)
    max_tokens: int = Field(default=16, ge=1, le=4096)
    answer: str | None = None
    tests: str | None = None

    @model_validator(mode="after")
    def _consistent(self) -> EvalItem:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("exactly one of `prompt` or `messages` is required")
        if self.messages is not None and not any(m.role == "user" for m in self.messages):
            raise ValueError("`messages` needs at least one user message")
        _check_expected(self.scorer, self.expected)
        if self.tests is not None:
            check_tests(self.tests)
        if self.answer is not None and not score(
            self.answer, self.expected, self.scorer, self.tolerance
        ):
            raise ValueError(f"the sample `answer` does not pass the {self.scorer} scorer")
        return self

    @property
    def scoring(self) -> Scoring:
        """What the item is scored by (`contracts.code_tests.score_answer`)."""
        prompt = self.prompt or ""
        return Scoring(prompt, self.expected, self.scorer, self.tolerance, self.tests)

    @property
    def key(self) -> str:
        """The item's name in a report's per-item outcomes: its `id`, else a hash of what is
        asked (so the same item is paired across pairs' reports)."""
        if self.id is not None:
            return str(self.id)
        asked = self.prompt if self.prompt is not None else repr(self.messages)
        return "sha256:" + hashlib.sha256(asked.encode()).hexdigest()[:16]


def _check_expected(scorer: Scorer, expected: Any) -> None:
    """`expected` must have the shape the scorer compares against."""
    if scorer is Scorer.NUMERIC:
        if isinstance(expected, bool) or not isinstance(expected, int | float):
            raise ValueError("`expected` must be a number for the numeric scorer")
    elif scorer is Scorer.JSON:
        if not isinstance(expected, dict) or not expected:
            raise ValueError("`expected` must be a non-empty JSON object for the json scorer")
    elif not isinstance(expected, str) or not expected.strip():
        raise ValueError(f"`expected` must be a non-empty string for the {scorer} scorer")
    elif scorer is Scorer.REGEX:
        try:
            re.compile(expected)
        except re.error as err:
            raise ValueError(f"`expected` is not a valid regex: {err}") from err


class EvalSetError(ValueError):
    """Eval lines that do not parse; `problems` hold one `file:line: ...` entry per problem."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


def format_loc(loc: Sequence[int | str]) -> str:
    """A pydantic error location as a field path: `messages[0].role`."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(line)"


def parse_eval_set(text: str, source: str) -> tuple[EvalItem, ...]:
    """Every item of a JSONL eval set (blank lines skipped). Raises EvalSetError listing each
    bad line as `source:line: field: message`, or when the file holds no item at all."""
    items: list[EvalItem] = []
    problems: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as err:
            problems.append(f"{source}:{number}: not valid JSON: {err.msg} (column {err.colno})")
            continue
        try:
            items.append(EvalItem.model_validate(data))
        except ValidationError as err:
            problems += [
                f"{source}:{number}: {format_loc(e['loc'])}: {e['msg']}" for e in err.errors()
            ]
    if not items and not problems:
        problems.append(f"{source}: holds no eval items")
    if problems:
        raise EvalSetError(problems)
    return tuple(items)


def eval_set_identity(files: Sequence[tuple[str, bytes]]) -> tuple[str, str]:
    """(id, sha256) of the eval files `(name, bytes)`: the id joins the file stems in name
    order; the hash covers every file's bytes in that order, so any edit changes it."""
    ordered = sorted(files, key=lambda f: f[0])
    digest = hashlib.sha256()
    for _, data in ordered:
        digest.update(data)
    stems = [name.rsplit("/", 1)[-1].removesuffix(".jsonl") for name, _ in ordered]
    ident = "+".join(stems) or "none"
    sha = digest.hexdigest()
    if len(ident) > 200:
        ident = ident[:187] + "+" + sha[:12]
    return ident, sha


@dataclass(frozen=True, slots=True)
class EvalResult:
    """One scored item. `error` is set when the request failed; such items count as wrong."""

    category: str
    correct: bool
    error: str | None = None
    item: str | None = None  # EvalItem.key, for per-item outcomes


def _per_item(results: Sequence[EvalResult]) -> dict[str, Any]:
    """`items` and `outcomes` (sorted by item key) when every result names a distinct item."""
    keys = [r.item for r in results]
    if any(not k or len(k) > 200 for k in keys) or len(set(keys)) != len(keys):
        return {}
    ordered = sorted(results, key=lambda r: str(r.item))
    return {
        "items": tuple(str(r.item) for r in ordered),
        "outcomes": "".join("1" if r.correct else "0" for r in ordered),
    }


def summarize_accuracy(
    results: Iterable[EvalResult], looks: int = 1
) -> tuple[CategoryAccuracy, ...]:
    """Accuracy per category (sorted by name) with its counts, Wilson 95% interval and, when
    every result names its item, the per-item outcomes (for paired comparisons). `looks`:
    the planned looks of `--until-decided` (see `sequential`), 1 for a fixed set."""
    by_category: dict[str, list[EvalResult]] = {}
    for result in results:
        by_category.setdefault(result.category, []).append(result)
    out = []
    for category in sorted(by_category):
        scored = by_category[category]
        n, right = len(scored), sum(r.correct for r in scored)
        low, high = wilson_interval(right, n)
        out.append(
            CategoryAccuracy(
                category=category,
                accuracy=right / n,
                n=n,
                ci_low=low,
                ci_high=high,
                right=right,
                looks=looks,
                **_per_item(scored),
            )
        )
    return tuple(out)


def labelled_prompts(items: Sequence[EvalItem]) -> tuple[LabelledPrompt, ...]:
    """Each item's prompt (or last user turn, what the router classifies) with its category,
    cut to the window the classifier reads; one entry per distinct (text, category), blank
    texts left out."""
    seen: dict[tuple[str, str], None] = {}
    for item in items:
        if item.prompt is not None:
            text = item.prompt
        else:
            text = [m.content for m in item.messages or () if m.role == "user"][-1]
        if text.strip():
            seen[prompt_window(text), item.category] = None
    return tuple(LabelledPrompt(text=t, category=c) for t, c in seen)
