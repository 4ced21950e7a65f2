"""Prompt classifier: text -> (category, complexity in [0, 1]) from cheap structural signals.

PURE apart from reading its calibrated parameters once at import (`classifier_params.json` next
to this file, written by `python -m data_plane.request.classifier_fit`). Microseconds per call:
it scans at most a head+tail window of the text, counts character classes with one
`bytes.translate` and a `count` per class, and looks the distinct words up in one word ->
groups table; weights and thresholds come from the calibration, not from this file. numpy is
used only for the final affine map (one matrix product), where it beats Python per call.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

HEAD_CHARS = 1024  # scanned window for long prompts: the head carries the ask and the fences,
TAIL_CHARS = 512  # the tail the question that follows pasted material
PARAMS_PATH = Path(__file__).with_name("classifier_params.json")
CATEGORIES: tuple[str, ...] = ("chat", "extraction", "code", "math", "reasoning")


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Word groups. A prompt scores one point per DISTINCT word of a group it contains, so repeated
# words do not dominate; how much each group counts for each category is calibrated.
CODE_SYNTAX = _words(
    "def return import class function const let var public private static void int func fn "
    "struct impl async await lambda elif null nullptr self this println printf console print "
    "include namespace template yield try catch except finally throw raise interface enum "
    "package select insert update where join"
)
CODE_TOPIC = _words(
    "code python javascript typescript java rust go golang kotlin c sql bash shell regex api bug "
    "compile compiler debug refactor implement method variable array loop git docker "
    "kubernetes test tests unit pytest library crate module query database deploy server "
    "endpoint thread threads frontend backend css html react django vim pip npm command "
    "crash error exception script program deadlock memory"
)
EXTRACTION = _words(
    "extract extraction json schema yaml csv field fields parse key keys values output list "
    "entities entity tag label labels classify normalise normalize normalised iso format "
    "structured record records table columns column following text excerpt invoice receipt "
    "email address date dates names null array object objects convert pull"
)
MATH = _words(
    "solve equation integral derivative prove proof compute calculate evaluate simplify sum "
    "series probability expected matrix eigenvalues determinant prime primes integer "
    "integers theorem factor factorial root roots sqrt log area perimeter triangle circle "
    "radius percent average mean variance polynomial limit converges modulo divisible x y "
    "n z dx estimator residue much many total times divided plus minus half twice ratio "
    "fraction decimal percentage"
)
REASONING = _words(
    "why explain reason reasoning compare analyse analyze analysis trade-offs tradeoffs "
    "pros cons argue argument evaluate assess critique implications consequences strategy "
    "plan decide decision should would if therefore because versus risks evidence "
    "assumptions justify likely conclusion policy ethical fair does who which mean means "
    "necessarily imply implies cause causes conclude whether"
)
CHAT = _words(
    "hi hello hey thanks thank please you your me my i recommend suggest favorite favourite "
    "joke story poem write tips ideas fun friend birthday draft letter speech toast nice "
    "good love want help our we"
)
DEMANDING = _words(
    "must ensure without exactly each every constraints requirements optimal optimise "
    "optimize efficient complexity rigorous justify derive generalise generalize concurrency "
    "concurrent distributed include both detailed step then also handle avoid all"
)
TECHNICAL = _words(
    "prove proof irrational theorem lemma invariant asymptotic amortized linearizable "
    "lock-free atomic concurrency consensus distributed rigorous formal derive derivation "
    "optimal optimality incremental barrier compiler parser interpreter schema normalized "
    "reconcile graph equilibrium causal mechanisms counterexample generalise generalize "
    "polymorphism unification recursion recursive complexity trade-off hypothesis"
)
_GROUPS = (CODE_SYNTAX, CODE_TOPIC, EXTRACTION, MATH, REASONING, CHAT, DEMANDING, TECHNICAL)
# The ask usually closes a message: the last ASK_WORDS words (about 240 characters of prose)
# are scored again on their own, so a chatty preamble does not decide the category of a short
# question at its end.
ASK_WORDS = 40
_ASK_GROUPS = (CODE_SYNTAX | CODE_TOPIC, EXTRACTION, MATH, REASONING, CHAT)


Word = str | bytes  # ASCII text is split as bytes (faster), other text as str


Membership = dict[Word, tuple[int, ...]]


def _membership(groups: tuple[frozenset[str], ...]) -> tuple[Membership, Membership]:
    """word -> the indexes of the groups it belongs to (only words in some group): one table
    keyed by str, one by ASCII bytes. Never one table for both: "abc" and b"abc" hash alike,
    so every hit would first compare a str with a bytes (a slow, failing comparison)."""
    words = frozenset().union(*groups)
    by_str: Membership = {}
    by_bytes: Membership = {}
    for w in words:
        by_str[w] = by_bytes[w.encode("ascii")] = tuple(i for i, g in enumerate(groups) if w in g)
    return by_str, by_bytes


_IN_GROUPS = _membership(_GROUPS)
_IN_ASK_GROUPS = _membership(_ASK_GROUPS)
# log1p of a distinct-word count, which never exceeds the size of the largest group
_LOG1P = tuple(math.log1p(k) for k in range(max(len(g) for g in _GROUPS + _ASK_GROUPS) + 1))


def _group_scores(distinct: set[Word], membership: Membership, n: int) -> list[float]:
    """log1p(number of distinct words of each group present): one set intersection with
    every group's words at once, then a table lookup per word found."""
    counts = [0] * n
    for word in membership.keys() & distinct:
        for i in membership[word]:
            counts[i] += 1
    return [_LOG1P[c] for c in counts]


# Characters folded to spaces before splitting into words (keeps '-', '+' and '_' in words).
_FOLDED = "()[]{}<>.,;:!?\"'`=*/\\|#$%&@~^"
_SPLIT = str.maketrans(dict.fromkeys(_FOLDED, " "))
# The same for ASCII bytes; str.split() also splits at \x1c-\x1f, bytes.split() does not.
_ASCII_SPLIT = bytes.maketrans(
    _FOLDED.encode() + bytes(range(0x1C, 0x20)), b" " * (len(_FOLDED) + 4)
)


def _folded(text: str, ascii_bytes: bytes | None) -> str | bytes:
    """`text` lowercased with punctuation folded to spaces; `ascii_bytes` is `text` encoded
    when it is ASCII (the same characters as bytes, from cheaper byte operations)."""
    if ascii_bytes is not None:
        return ascii_bytes.lower().translate(_ASCII_SPLIT)
    return text.lower().translate(_SPLIT)


def _split_words(text: str, ascii_bytes: bytes | None) -> list[Word]:
    """The words of `_folded(text, ascii_bytes)`."""
    return _folded(text, ascii_bytes).split()  # type: ignore[return-value]


# Character classes, disjoint: `translate` maps a byte of class j to the byte j + 1 and deletes
# every byte of no class, and one `count` per class reads the (much shorter) result.
_CLASS_BYTES = (
    b"{};",  # braces_ratio
    b"()[]",  # parens_ratio
    b"=",  # equals_ratio
    b"+*^/",  # operators_ratio
    b"0123456789",  # digits_ratio
    b"\n",  # newlines_ratio
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZ",  # uppercase_ratio
    b"\"'",  # quotes_ratio
    b":",  # colons_ratio
    b"\\$",  # latex_ratio
    b"`",  # backticks_ratio
    b"_",  # underscore_ratio
    bytes(range(128, 256)),  # non_ascii_ratio
    b" \t\r",  # whitespace other than newlines (for mean word length)
    b"?",  # questions (sentence ends are these plus the next class)
    b".!",  # other sentence ends
)
_RATIO_CLASSES = 13  # the first 13 classes are reported as shares of the window


def _class_table() -> tuple[bytes, bytes]:
    table = bytearray(256)
    for j, members in enumerate(_CLASS_BYTES):
        for b in members:
            if table[b]:
                raise ValueError(f"byte {b} is in two classes")
            table[b] = j + 1
    return bytes(table), bytes(b for b in range(256) if not table[b])


_CLASS_OF, _UNCLASSED = _class_table()


def _read_only(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    array.setflags(write=False)
    return array


_CLASS_CODES = tuple(range(1, len(_CLASS_BYTES) + 1))

FEATURE_NAMES: tuple[str, ...] = (
    "braces_ratio",
    "parens_ratio",
    "equals_ratio",
    "operators_ratio",
    "digits_ratio",
    "newlines_ratio",
    "uppercase_ratio",
    "quotes_ratio",
    "colons_ratio",
    "latex_ratio",
    "backticks_ratio",
    "underscore_ratio",
    "non_ascii_ratio",
    "indented_lines_ratio",
    "questions_log",
    "sentences_log",
    "chars_log",
    "words_log",
    "distinct_words_ratio",
    "mean_word_chars",
    "code_syntax_words",
    "code_topic_words",
    "extraction_words",
    "math_words",
    "reasoning_words",
    "chat_words",
    "demanding_words",
    "technical_words",
    "ask_code_words",
    "ask_extraction_words",
    "ask_math_words",
    "ask_reasoning_words",
    "ask_chat_words",
)


def _window(text: str) -> str:
    if len(text) <= HEAD_CHARS + TAIL_CHARS:
        return text
    return text[:HEAD_CHARS] + "\n" + text[-TAIL_CHARS:]


def _indented(raw: bytes, newlines: int) -> int:
    """Lines indented by two spaces or a tab (after the first line): UTF-8 keeps ASCII
    patterns intact, so counting in the bytes counts the characters."""
    return raw.count(b"\n  ") + raw.count(b"\n\t") if newlines else 0


class PromptScan(NamedTuple):
    """One read of a prompt, shared by the complexity features and the category classifier
    (`data_plane.request.category`): the window, its UTF-8 bytes, its words and their set.
    Words are bytes when the window is ASCII (`ascii_raw` is then `raw`), else str."""

    chars: int  # length of the whole text
    window: str
    raw: bytes
    ascii_raw: bytes | None
    words: list[Word]
    distinct: set[Word]


def scan_prompt(text: str) -> PromptScan:
    """The window of `text` read once (see `PromptScan`)."""
    scan = _window(text)
    # surrogatepass: JSON may carry a lone surrogate (\ud800), which strict UTF-8 refuses
    raw = scan.encode("utf-8", "surrogatepass")
    ascii_raw = raw if scan.isascii() else None
    words = _split_words(scan, ascii_raw)
    return PromptScan(len(text), scan, raw, ascii_raw, words, set(words))


def features(text: str) -> list[float]:
    """The calibrated model's inputs, in FEATURE_NAMES order (shared with calibration)."""
    return features_of(scan_prompt(text))


def features_of(scan: PromptScan) -> list[float]:
    """`features` of an already scanned prompt."""
    raw, words, distinct = scan.raw, scan.words, scan.distinct
    n = max(len(raw), 1)
    marked = raw.translate(_CLASS_OF, _UNCLASSED)
    classes = [marked.count(code) for code in _CLASS_CODES]
    newlines, blanks, questions, other_ends = classes[5], classes[13], classes[14], classes[15]
    n_words = max(len(words), 1)
    ask = distinct if len(words) <= ASK_WORDS else set(words[-ASK_WORDS:])
    ratios = [c / n for c in classes[:_RATIO_CLASSES]]
    ratios += (
        _indented(raw, newlines) / (newlines + 1),
        math.log1p(questions),
        math.log1p(questions + other_ends),
        math.log1p(scan.chars),
        math.log1p(len(words)),
        len(distinct) / n_words,
        (n - blanks - newlines) / n_words,
    )
    table = 1 if scan.ascii_raw is not None else 0  # words are bytes, else str
    ratios += _group_scores(distinct, _IN_GROUPS[table], len(_GROUPS))
    ratios += _group_scores(ask, _IN_ASK_GROUPS[table], len(_ASK_GROUPS))
    return ratios


@dataclass(frozen=True, slots=True)
class Model:
    """Calibrated weights; the category is the argmax of `weights @ x + bias`, complexity the
    logistic of `complexity_weights @ x + complexity_bias` (standardisation folded in)."""

    categories: tuple[str, ...]
    weights: npt.NDArray[np.float64]
    bias: npt.NDArray[np.float64]
    complexity_weights: npt.NDArray[np.float64]
    complexity_bias: float
    # Both as one affine map, so a call costs one matrix product: rows = categories, then
    # complexity; the last column is the bias (times a 1 appended to the features).
    _affine: npt.NDArray[np.float64] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        weights = np.vstack([self.weights, self.complexity_weights])
        offsets = np.append(self.bias, self.complexity_bias)
        object.__setattr__(self, "_affine", _read_only(np.column_stack([weights, offsets])))

    def classify(self, text: str) -> tuple[str, float]:
        return self.classify_scan(scan_prompt(text))

    def classify_scan(self, scan: PromptScan) -> tuple[str, float]:
        """`classify` of an already scanned prompt."""
        scores, complexity = self.evaluate(scan)
        category = self.categories[scores.index(max(scores))]  # the first on a tie, as argmax
        return category, complexity

    def evaluate(self, scan: PromptScan) -> tuple[list[float], float]:
        """(the category scores, in `categories` order, whose softmax is the calibrated
        P(category); P(high complexity)) of a scanned prompt."""
        x = features_of(scan)
        x.append(1.0)
        scores: list[float] = (self._affine @ np.fromiter(x, np.float64, len(x))).tolist()
        z = scores.pop()
        return scores, 1.0 / (1.0 + math.exp(-z)) if z > -700.0 else 0.0


def model_from_params(params: dict[str, Any]) -> Model:
    """Build a Model from the calibration's JSON; refuses params fitted on other features."""
    if tuple(params["feature_names"]) != FEATURE_NAMES:
        raise ValueError("parameters were calibrated for other features")
    return Model(
        categories=tuple(params["categories"]),
        weights=_read_only(np.array(params["category_weights"], dtype=np.float64)),
        bias=_read_only(np.array(params["category_bias"], dtype=np.float64)),
        complexity_weights=_read_only(np.array(params["complexity_weights"], dtype=np.float64)),
        complexity_bias=float(params["complexity_bias"]),
    )


def _load(path: Path) -> Model | str:
    """The model, or why it cannot be used (so that calibration can import `features`)."""
    try:
        return model_from_params(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError) as err:
        return (
            f"{path.name} is missing or stale ({err}); "
            "run `python -m data_plane.request.classifier_fit`"
        )


_MODEL = _load(PARAMS_PATH)  # read-only package data, loaded once at import


def classify(text: str) -> tuple[str, float]:
    """(category, complexity): the most likely calibrated category and P(high complexity).

    Deterministic; scans at most HEAD_CHARS + TAIL_CHARS characters (the full length still
    counts through `chars_log`). Raises RuntimeError when the parameters file is unusable.
    """
    return classify_with(_MODEL, text)


def classify_with(model: Model | str, text: str) -> tuple[str, float]:
    """`model.classify(text)`; a str model is the reason the parameters could not be loaded."""
    if isinstance(model, str):
        raise RuntimeError(model)
    return model.classify(text)
