"""The category classifier as it travels: labelled prompts in, a linear model over prompt terms out.

Owns the feature space both planes share (`prompt_terms`, stdlib only, the one definition the
control plane trains on and the data plane classifies with) and the wire schemas
(`LabelledPrompt`, `CategoryModel`). No fitting here: that is the control plane's job.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from itertools import pairwise
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from contracts.names import Category

FEATURES: Literal["prompt-terms-v1"] = "prompt-terms-v1"  # bump when `prompt_terms` changes
HEAD_CHARS = 1024  # the window read from a long prompt: its head carries the ask and the fences,
TAIL_CHARS = 512  # its tail the question that follows pasted material
BIGRAM_WORDS = 32  # word pairs are taken from the first and last words only (speed)
# Characters folded to spaces before splitting into words; each one present is also a term.
FOLDED = "()[]{}<>.,;:!?\"'`=*/\\|#$%&@~^"
PUNCTUATION = tuple(FOLDED + "+-_")
_SPLIT = str.maketrans(dict.fromkeys(FOLDED, " "))
MAX_PROMPT_CHARS = 32_768
BUILTIN_PROMPTS_PATH = Path(__file__).with_name("labelled_prompts.jsonl")

FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
PosFloat = Annotated[float, Field(gt=0.0, allow_inf_nan=False)]
Ratio = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]


def prompt_window(text: str) -> str:
    """The part of a prompt that is read: all of it up to HEAD_CHARS + TAIL_CHARS, else the
    head and the tail joined by a newline."""
    if len(text) <= HEAD_CHARS + TAIL_CHARS:
        return text
    return text[:HEAD_CHARS] + "\n" + text[-TAIL_CHARS:]


def prompt_terms(text: str) -> set[str]:
    """The distinct terms of a prompt's window: lowercased words (punctuation folded to
    spaces), "word word" pairs among the first and last BIGRAM_WORDS words, and each
    punctuation character present. A model's `terms` are drawn from these."""
    window = prompt_window(text)
    words = window.lower().translate(_SPLIT).split()
    terms = set(words)
    ends = words if len(words) <= 2 * BIGRAM_WORDS else words[:BIGRAM_WORDS] + words[-BIGRAM_WORDS:]
    terms.update(map(" ".join, pairwise(ends)))
    terms.update(c for c in PUNCTUATION if c in window)
    return terms


class _Contract(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


def _utf8(text: str) -> str:
    """Refuse lone surrogates (JSON can carry them; UTF-8, Redis and hashes cannot)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ValueError("must be valid Unicode text (no lone surrogates)") from err
    return text


Utf8Text = Annotated[str, AfterValidator(_utf8)]


class LabelledPrompt(_Contract):
    """One prompt a team says belongs to `category` (an eval item's user turn, or uploaded)."""

    text: Utf8Text = Field(min_length=1, max_length=MAX_PROMPT_CHARS)
    category: Category


class ClassifierTraining(_Contract):
    """How a model was fitted and how well it did on prompts it did not train on."""

    library: str = Field(max_length=200, description="e.g. scikit-learn 1.9.1 LogisticRegression")
    examples: dict[Category, int] = Field(description="training prompts per category")
    sources: dict[str, int] = Field(description="training prompts per source (builtin, ...)")
    cv_folds: int = Field(ge=0, description="0 when too few prompts to cross-validate")
    cv_accuracy: Ratio | None = None
    confusion: tuple[tuple[int, ...], ...] = Field(
        default=(), description="cross-validated counts: row = true, column = predicted category"
    )


class CategoryModel(_Contract):
    """A multinomial linear model over `prompt_terms`: x[t] = idf[t] for each term t of the
    prompt found in `terms` (then scaled to unit length), scores = x @ weights + bias, and the
    probabilities are their softmax, in `categories` order. The complexity score is the
    logistic of x @ complexity_weights + complexity_bias (a binary head on the same terms)."""

    kind: Literal["CategoryModel"] = "CategoryModel"
    features: Literal["prompt-terms-v1"] = FEATURES
    categories: tuple[Category, ...] = Field(min_length=2)
    terms: tuple[Utf8Text, ...] = Field(max_length=50_000)
    idf: tuple[PosFloat, ...]
    weights: tuple[tuple[FiniteFloat, ...], ...] = Field(description="one row per term")
    bias: tuple[FiniteFloat, ...]
    complexity_weights: tuple[FiniteFloat, ...] = Field(description="one value per term")
    complexity_bias: FiniteFloat
    training: ClassifierTraining
    model_sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="see `parameters_sha256`")

    @model_validator(mode="after")
    def _consistent(self) -> CategoryModel:
        k = len(self.categories)
        if len(set(self.categories)) != k:
            raise ValueError("categories must be unique")
        if len(set(self.terms)) != len(self.terms):
            raise ValueError("terms must be unique")
        n = len(self.terms)
        if len(self.idf) != n or len(self.weights) != n or len(self.complexity_weights) != n:
            raise ValueError("idf, weights and complexity_weights need one entry per term")
        if len(self.bias) != k or any(len(row) != k for row in self.weights):
            raise ValueError("bias and every weights row need one value per category")
        if self.model_sha256 != parameters_sha256(self):
            raise ValueError("model_sha256 does not match the model's parameters")
        return self


def parameters_sha256(model: CategoryModel | Mapping[str, object]) -> str:
    """sha256 of the canonical JSON of what decides a classification: the feature space,
    categories, terms, idf, weights, bias and the complexity head (not the training report)."""
    data = model.model_dump(mode="json") if isinstance(model, CategoryModel) else model
    keys = (
        *("features", "categories", "terms", "idf", "weights", "bias"),
        *("complexity_weights", "complexity_bias"),
    )
    payload = {k: data.get(k) for k in keys}
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
