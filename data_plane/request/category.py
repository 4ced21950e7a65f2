"""A request's category: the table's classifier (or the built-in one), with doubt made explicit.

PURE apart from reading the built-in model once at import (`category_model.json` next to this
file, written by `python -m control_plane.build.category_training`). Classifies with the shipped
arrays and the shared `prompt_terms` (contracts/category_model.py), never with scikit-learn, so
every replica fed one table decides alike. Doubt: docs/classifier.md.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from contracts.budget_headers import CATEGORY_HEADER
from contracts.category_model import BIGRAM_WORDS, PUNCTUATION, CategoryModel, prompt_window
from data_plane.domain import (
    Budget,
    CategoryDefaults,
    CategoryDoubt,
    CategoryScorer,
    CompiledTable,
    RequestFacts,
)
from data_plane.errors import InvalidBudget
from data_plane.request.body import ParsedBody
from data_plane.request.prompt_scan import PromptScan, scan_prompt
from data_plane.request.prompt_size import IMAGE_CHARS
from data_plane.request.prompt_tokens import (
    PromptCount,
    counted_chars,
    special_chars,
    templated_chars,
)

BUILTIN_MODEL_PATH = Path(__file__).with_name("category_model.json")
# Windows (at most HEAD_CHARS + TAIL_CHARS + 1 characters each) whose outputs a classifier
# remembers: 1,024 of them hold at most ~1.6 MB of text per table version.
MEMO_WINDOWS = 1024


def _read_only(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    array.setflags(write=False)
    return array


@dataclass(frozen=True, slots=True)
class CategoryClassifier:
    """A `CategoryModel` compiled for lookups: term -> row (str words, and bytes for the ASCII
    ones, matching `PromptScan`'s words; word pairs as tuples), and per row the idf-weighted
    category weights, the idf-weighted complexity weight and idf**2, so a prompt's scores are
    one gather and one sum."""

    categories: tuple[str, ...]
    model_sha256: str
    terms: tuple[str, ...]
    # (word -> row, (word, word) -> row), for str words and for the ASCII terms as bytes
    words: tuple[Mapping[Any, int], Mapping[Any, int]]
    ascii_words: tuple[Mapping[Any, int], Mapping[Any, int]]
    punctuation: Mapping[int, int]  # byte of a punctuation term -> its row
    table: npt.NDArray[np.float64]  # rows: terms; idf * weights..., idf * complexity, idf**2
    bias: npt.NDArray[np.float64]  # the categories' biases, then the complexity bias
    builtin: bool = False
    _empty: tuple[list[float], float] = field(init=False, repr=False, compare=False)
    _bias: tuple[float, ...] = field(init=False, repr=False, compare=False)
    # window -> (P(category), P(high complexity)), least recently used first
    _memo: OrderedDict[str, tuple[tuple[float, ...], float]] = field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "_empty", _outputs(self.bias.tolist()))
        object.__setattr__(self, "_bias", tuple(self.bias.tolist()))
        object.__setattr__(self, "_memo", OrderedDict())

    @property
    def remembered(self) -> int:
        """How many windows `evaluate_text` remembers now (at most MEMO_WINDOWS)."""
        return len(self._memo)

    def evaluate_text(self, text: str) -> tuple[list[float], float]:
        """`evaluate` of `text`'s scan, remembered by the window the scan reads (the outputs
        depend on nothing else) for the last MEMO_WINDOWS windows: a repeated prompt costs a
        hash of at most HEAD_CHARS + TAIL_CHARS characters instead of a scan and a gather.
        The memo lives and dies with this classifier, so a new table version starts empty."""
        window = prompt_window(text)
        memo = self._memo
        known = memo.get(window)
        if known is not None:
            memo.move_to_end(window)
            return list(known[0]), known[1]
        probabilities, complexity = self.evaluate(scan_prompt(text))
        memo[window] = (tuple(probabilities), complexity)
        if len(memo) > MEMO_WINDOWS:
            memo.popitem(last=False)
        return probabilities, complexity

    def probabilities(self, text: str) -> list[float]:
        """P(category | text) in `categories` order (softmax of the linear scores)."""
        return self.probabilities_of(scan_prompt(text))

    def probabilities_of(self, scan: PromptScan) -> list[float]:
        """`probabilities` of an already scanned prompt."""
        return self.evaluate(scan)[0]

    def evaluate(self, scan: PromptScan) -> tuple[list[float], float]:
        """(P(category) in `categories` order, P(high complexity)) of a scanned prompt: one
        gather and one column sum in numpy, then seven numbers in plain floats (a numpy call
        per step would cost more than its arithmetic; the floats are the same)."""
        hits = list(self.found_rows(scan))
        if not hits:
            return list(self._empty[0]), self._empty[1]
        summed: list[float] = _add_reduce(self.table.take(hits, axis=0), 0).tolist()
        norm = math.sqrt(summed.pop())
        return _outputs([x / norm + b for x, b in zip(summed, self._bias, strict=True)])

    def found_rows(self, scan: PromptScan) -> set[int]:
        """The rows of the model's terms among `prompt_terms` of the scanned prompt, found
        from the scan's words (the same set: tested against the contract's definition)."""
        words: list[Any] = scan.words
        if len(words) > 2 * BIGRAM_WORDS:
            words = words[:BIGRAM_WORDS] + words[-BIGRAM_WORDS:]
        punctuation = self.punctuation
        found = set(map(punctuation.__getitem__, punctuation.keys() & _punctuation_in(scan.raw)))
        lookups = self.words if scan.ascii_raw is None else self.ascii_words
        singles, pairs = lookups
        found.update(map(singles.__getitem__, singles.keys() & scan.distinct))
        # keys() & an iterator looks each pair up as it comes: no set of the pairs is built
        found.update(map(pairs.__getitem__, pairs.keys() & pairwise(words)))
        return found


_add_reduce = np.add.reduce  # ndarray.sum's own reduction, without its Python wrapper
_NOT_PUNCTUATION = bytes(b for b in range(256) if chr(b) not in PUNCTUATION)


def _punctuation_in(raw: bytes) -> bytes:
    """The punctuation bytes of `raw`: in UTF-8 an ASCII byte is always that character."""
    return raw.translate(None, _NOT_PUNCTUATION)


def _outputs(scores: list[float]) -> tuple[list[float], float]:
    """(softmax of the category scores, logistic of the last score: complexity)."""
    z = scores.pop()
    return _softmax(scores), 1.0 / (1.0 + math.exp(-z)) if z > -700.0 else 0.0


def _softmax(scores: list[float]) -> list[float]:
    top = max(scores)
    exps = [math.exp(s - top) for s in scores]
    total = sum(exps)
    return [e / total for e in exps]


def _lookups(terms: tuple[str, ...]) -> tuple[Any, Any, dict[int, int]]:
    """(str lookups, ASCII bytes lookups, punctuation byte -> row) for `CategoryClassifier`."""
    words: dict[str, int] = {}
    pairs: dict[tuple[str, str], int] = {}
    for i, term in enumerate(terms):
        first, space, second = term.partition(" ")
        if space:
            pairs[first, second] = i
        else:
            words[term] = i
    ascii_words = {w.encode(): i for w, i in words.items() if w.isascii()}
    ascii_pairs = {(a.encode(), b.encode()): i for (a, b), i in pairs.items() if (a + b).isascii()}
    punctuation = {ord(t): i for i, t in enumerate(terms) if t in PUNCTUATION}
    return (words, pairs), (ascii_words, ascii_pairs), punctuation


def compile_classifier(model: CategoryModel, builtin: bool = False) -> CategoryClassifier:
    """The lookup form of a validated model (built once per table version)."""
    idf = np.array(model.idf, dtype=np.float64).reshape(len(model.terms), 1)
    weights = np.array(model.weights, dtype=np.float64).reshape(
        len(model.terms), len(model.categories)
    )
    complexity = np.array(model.complexity_weights, dtype=np.float64).reshape(-1, 1)
    words, ascii_words, punctuation = _lookups(model.terms)
    return CategoryClassifier(
        categories=model.categories,
        model_sha256=model.model_sha256,
        terms=model.terms,
        words=words,
        ascii_words=ascii_words,
        punctuation=punctuation,
        table=_read_only(np.hstack([idf * weights, idf * complexity, idf * idf])),
        bias=_read_only(np.array([*model.bias, model.complexity_bias], dtype=np.float64)),
        builtin=builtin,
    )


BUILTIN = compile_classifier(
    CategoryModel.model_validate_json(BUILTIN_MODEL_PATH.read_bytes()), builtin=True
)


def check_category(category: str | None, known: Mapping[str, CategoryDefaults]) -> None:
    """Raise InvalidBudget naming X-Task-Category and the allowed values when `category` is
    not one of the table's categories."""
    if category is not None and category not in known:
        allowed = ", ".join(sorted(known))
        raise InvalidBudget(
            f"{CATEGORY_HEADER} {category!r} is not a category of this routing table; "
            f"allowed values: {allowed}",
            param=CATEGORY_HEADER,
        )


def plausible_categories(
    categories: Sequence[str], probabilities: Sequence[float], confidence: float
) -> tuple[str, ...]:
    """The most probable categories, best first, until together they hold at least
    `confidence` of the probability: those the classifier cannot rule out."""
    ranked = sorted(zip(probabilities, categories, strict=True), key=lambda pc: -pc[0])
    chosen: list[str] = []
    mass = 0.0
    for p, category in ranked:
        chosen.append(category)
        mass += p
        if mass >= confidence:
            break
    return tuple(chosen)


def decide_category(
    categories: Sequence[str],
    probabilities: Sequence[float],
    known: Mapping[str, CategoryDefaults],
    confidence: float,
    doubt_category: str | None,
) -> tuple[str, CategoryDoubt | None]:
    """(category to route under, the doubt when there was one), from the classifier's
    probabilities. Sure (top probability >= `confidence`): the top category. Unsure:
    `doubt_category` when the policy names one, else the category with the strictest floor
    among the plausible ones the table knows (ties: the more probable)."""
    best = max(range(len(categories)), key=probabilities.__getitem__)  # the first on a tie
    top, p_top = categories[best], probabilities[best]
    if p_top >= confidence:
        return top, None
    plausible = plausible_categories(categories, probabilities, confidence)
    routed = doubt_category
    if routed is None:
        floors = [(known[c].min_accuracy, -i, c) for i, c in enumerate(plausible) if c in known]
        routed = max(floors)[2] if floors else top
    return routed, CategoryDoubt(top, p_top, plausible, routed)


def classify_text(classifier: CategoryScorer, text: str) -> tuple[list[float], float]:
    """(P(category) in `classifier.categories` order, complexity) of `text`: the work a
    request costs (one read of the prompt, one gather over the terms found), unless the
    classifier remembers its window."""
    return classifier.evaluate_text(text)


def weighed_chars(
    parsed: ParsedBody, table: CompiledTable, counted: PromptCount | None = None
) -> int:
    """The body's characters with its JSON weighed by the table's measured figure for the
    alias (`CompiledTable.json_weight`; prompt_size), so the one estimate counts JSON at the
    family's json_chars_per_token, and each image part at the alias's characters per image
    (`CompiledTable.image_chars`: the model's measured tokens per image) in place of the
    IMAGE_CHARS the body counted. A count by the tokenizer the table names for the alias
    (`counted`, the same SHA-256) stands for the text and JSON instead (`prompt_tokens`).
    Priced per character, a chat body adds what the alias's chat template adds, where the
    table carries it (`prompt_tokens.templated_chars`: the rule `count_parts` applies), and a
    completions body the special tokens the engine adds to each prompt
    (`prompt_tokens.special_chars`)."""
    tokenizer = table.tokenizers.get(parsed.alias) if table.tokenizers else None
    if tokenizer is not None and counted is not None and tokenizer.sha256 == counted.sha256:
        images = parsed.images * table.image_chars.get(parsed.alias, IMAGE_CHARS)
        return counted_chars(counted, tokenizer) + images
    chars = parsed.input_chars
    weight = 1.0
    if parsed.json_chars:
        weight = table.json_weight.get(parsed.alias, 1.0)
        chars += math.ceil(parsed.json_chars * weight) - parsed.json_chars
    if parsed.images:
        chars += parsed.images * (table.image_chars.get(parsed.alias, IMAGE_CHARS) - IMAGE_CHARS)
    if tokenizer is not None and tokenizer.template is not None and parsed.messages:
        tools = math.ceil(parsed.tools_chars * weight)
        per_token = tokenizer.token_chars
        chars = templated_chars(tokenizer.template, chars, parsed.messages, tools, per_token)
    elif tokenizer is not None and tokenizer.special_tokens and parsed.prompts:
        chars += special_chars(tokenizer.special_tokens, parsed.prompts, tokenizer.token_chars)
    return chars


def request_facts(
    parsed: ParsedBody, table: CompiledTable, budget: Budget, counted: PromptCount | None = None
) -> RequestFacts:
    """Routing facts for a parsed body under `table`: the category is X-Task-Category when
    given (a 400 unless the table knows it), else the table's classifier's, with doubt; the
    complexity score is the same model's complexity head; the prompt's size is `counted` by
    the alias's tokenizer where it was (`weighed_chars`)."""
    check_category(budget.category, table.categories)
    classifier = table.classifier
    probabilities, score = classifier.evaluate_text(parsed.classify_text)
    doubt = None
    if budget.category is not None:
        category = budget.category
    else:
        category, doubt = decide_category(
            classifier.categories,
            probabilities,
            table.categories,
            table.policy.category_confidence,
            table.policy.doubt_category,
        )
    return RequestFacts(
        alias=parsed.alias,
        category=category,
        complexity=score,
        input_chars=weighed_chars(parsed, table, counted),
        max_output_tokens=parsed.max_output_tokens,
        stream=parsed.stream,
        wants_json=parsed.wants_json,
        doubt=doubt,
    )
