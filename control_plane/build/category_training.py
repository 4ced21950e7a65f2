"""Training the category classifier from labelled prompts (scikit-learn), exported as plain arrays.

Deterministic and free of I/O apart from `builtin_prompts` (package data): the same prompts give
the same `CategoryModel`, byte for byte. The model is a multinomial logistic regression over the
binary, idf-weighted, unit-length `prompt_terms` of each prompt (contracts/category_model.py);
it ships as terms, idf, weights and bias, so a data plane classifies without scikit-learn.
Measured choices (docs/classifier.md): MIN_DF and C.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TypeVar

import numpy as np
import sklearn
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import confusion_matrix
from sklearn.model_selection import StratifiedKFold
from sklearn.pipeline import Pipeline
from threadpoolctl import threadpool_limits

from contracts.category_model import (
    BUILTIN_PROMPTS_PATH,
    FEATURES,
    CategoryModel,
    LabelledPrompt,
    parameters_sha256,
    prompt_terms,
)
from contracts.names import KNOWN_CATEGORIES
from contracts.profile_report import ProfileReport

MIN_DF = 3  # a term must occur in at least this many training prompts (drops one-off words)
C = 30.0  # inverse L2 strength of the logistic regression
COMPLEXITY_C = 10.0  # the same for the complexity head (5-fold on the built-in prompts: 0.93)
FOLDS = 5  # cross-validation folds for the reported accuracy (fewer when a category is small)
SIGNIFICANT_DIGITS = 6  # exported floats are rounded: a smaller table, the same decisions
BUILTIN_SOURCE = "builtin"
# BLAS and OpenMP threads while training (docs/classifier.md "Threads"): the fits are small
# sparse products, and with one thread per core each pool spins against the others and
# against whatever else the machine runs (500 prompts: 0.4 s at 1 thread, 24-45 s with two
# cores' threads on a loaded two-core machine).
TRAINING_THREADS = 1
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Source:
    """Labelled prompts and where they came from (e.g. "builtin", "profile:fam@q")."""

    name: str
    prompts: tuple[LabelledPrompt, ...]


class TrainingError(ValueError):
    """The prompts cannot train a classifier (e.g. fewer than two categories)."""


def _builtin_docs() -> list[dict[str, str]]:
    lines = BUILTIN_PROMPTS_PATH.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def builtin_prompts() -> tuple[LabelledPrompt, ...]:
    """The hand-written calibration prompts shipped with Gearbox (contracts package data)."""
    return tuple(LabelledPrompt(text=d["text"], category=d["category"]) for d in _builtin_docs())


def builtin_complexity() -> tuple[tuple[str, bool], ...]:
    """(text, is high complexity) of the built-in prompts: the complexity head's labels."""
    return tuple((d["text"], d["complexity"] == "high") for d in _builtin_docs())


def _analyzer(text: str) -> list[str]:
    return sorted(prompt_terms(text))


def _pipeline(min_df: int) -> Pipeline:
    vectorizer = TfidfVectorizer(analyzer=_analyzer, binary=True, min_df=min_df, norm="l2")
    return Pipeline([("terms", vectorizer), ("model", LogisticRegression(C=C, max_iter=5000))])


def _round(values: Iterable[float]) -> list[float]:
    return [float(f"{v:.{SIGNIFICANT_DIGITS}g}") for v in values]


def _folds(labels: Sequence[str]) -> int:
    smallest = min(labels.count(c) for c in set(labels))
    return min(FOLDS, smallest) if smallest >= 2 else 0


def _cross_validate(
    texts: Sequence[str], labels: Sequence[str], categories: Sequence[str], folds: int
) -> tuple[float | None, list[list[int]]]:
    """Accuracy and confusion matrix over held-out folds (each prompt predicted once, by a
    model that never saw it; the vocabulary is rebuilt per fold)."""
    if folds < 2:
        return None, []
    predicted = [""] * len(texts)
    splitter = StratifiedKFold(n_splits=folds, shuffle=True, random_state=0)
    for train, test in splitter.split(texts, labels):
        fitted = _fit([texts[i] for i in train], [labels[i] for i in train])
        for i, guess in zip(test, fitted.predict([texts[i] for i in test]), strict=True):
            predicted[i] = str(guess)
    matrix = confusion_matrix(labels, predicted, labels=list(categories))
    hits = sum(p == t for p, t in zip(predicted, labels, strict=True))
    return hits / len(texts), matrix.tolist()


def _fit(texts: Sequence[str], labels: Sequence[str]) -> Pipeline:
    """The pipeline fitted on these prompts; MIN_DF is relaxed for tiny training sets."""
    min_df = MIN_DF if len(texts) >= 10 * MIN_DF else 1
    return _pipeline(min_df).fit(list(texts), list(labels))


def _complexity_head(fitted: Pipeline) -> tuple[list[float], float]:
    """Weights per term and bias of P(high complexity), fitted on the built-in prompts'
    labels over the category model's terms (team prompts carry no complexity label)."""
    labelled = builtin_complexity()
    x = fitted.named_steps["terms"].transform([text for text, _ in labelled])
    head = LogisticRegression(C=COMPLEXITY_C, max_iter=5000)
    head.fit(x, [high for _, high in labelled])
    return _round(head.coef_[0]), _round(head.intercept_)[0]


def _arrays(fitted: Pipeline) -> tuple[list[str], list[float], list[list[float]], list[float]]:
    """(terms, idf, weights with one row per term, bias) in the model's category order."""
    vectorizer: TfidfVectorizer = fitted.named_steps["terms"]
    model: LogisticRegression = fitted.named_steps["model"]
    coef, intercept = model.coef_, model.intercept_
    if coef.shape[0] == 1:  # two classes: p(second) = logistic(w.x + b) = softmax([0, w.x + b])
        coef, intercept = np.vstack([np.zeros_like(coef), coef]), np.append(0.0, intercept)
    terms = [str(t) for t in vectorizer.get_feature_names_out()]
    weights = [_round(row) for row in coef.T]
    return terms, _round(vectorizer.idf_), weights, _round(intercept)


def train_category_model(sources: Sequence[Source], categories: Sequence[str]) -> CategoryModel:
    """Fit on every prompt of `sources` whose category is in `categories` (duplicates of one
    (text, category) count once), cross-validate, and export. Raises TrainingError when fewer
    than two categories have prompts."""
    seen: dict[tuple[str, str], str] = {}
    for source in sources:
        for p in source.prompts:
            if p.category in categories:
                seen.setdefault((p.text, p.category), source.name)
    return _train(tuple(sorted(seen.items())))


def with_training_threads(work: Callable[[], _T], threads: int = TRAINING_THREADS) -> _T:
    """`work()` with every BLAS and OpenMP pool of the process limited to `threads`, restored
    afterwards (threadpoolctl, which scikit-learn itself depends on)."""
    with threadpool_limits(limits=threads):
        return work()


@lru_cache(maxsize=8)
def _train(items: tuple[tuple[tuple[str, str], str], ...]) -> CategoryModel:
    """Memoised on the exact training set: rebuilding a table from the same prompts (every
    push and feedback refit does) reuses the fit. Trained with TRAINING_THREADS."""
    return with_training_threads(lambda: _train_now(items))


def _train_now(items: tuple[tuple[tuple[str, str], str], ...]) -> CategoryModel:
    texts = [text for (text, _), _ in items]
    labels = [category for (_, category), _ in items]
    learned = sorted(set(labels))
    if len(learned) < 2:
        raise TrainingError(f"labelled prompts cover {len(learned)} category; at least 2 needed")
    fitted = _fit(texts, labels)
    folds = _folds(labels)
    accuracy, confusion = _cross_validate(texts, labels, learned, folds)
    terms, idf, weights, bias = _arrays(fitted)
    complexity_weights, complexity_bias = _complexity_head(fitted)
    sources: dict[str, int] = {}
    for _, name in items:
        sources[name] = sources.get(name, 0) + 1
    data = {
        "features": FEATURES,
        "categories": [str(c) for c in fitted.named_steps["model"].classes_],
        "terms": terms,
        "idf": idf,
        "weights": weights,
        "bias": bias,
        "complexity_weights": complexity_weights,
        "complexity_bias": complexity_bias,
        "training": {
            "library": f"scikit-learn {sklearn.__version__} LogisticRegression(C={C:g}) "
            f"over idf-weighted prompt terms (min_df={MIN_DF})",
            "examples": {c: labels.count(c) for c in learned},
            "sources": dict(sorted(sources.items())),
            "cv_folds": folds,
            "cv_accuracy": None if accuracy is None else round(accuracy, 4),
            "confusion": confusion,
        },
    }
    return CategoryModel.model_validate({**data, "model_sha256": parameters_sha256(data)})


def classifier_for(
    reports: Sequence[ProfileReport], categories: Sequence[str]
) -> tuple[CategoryModel | None, list[str]]:
    """The table's classifier and a note for the build's warnings: trained on the reports'
    eval prompts plus the built-in prompts, or None (data planes keep their built-in model)
    when no report carries eval prompts or they cannot train one."""
    pushed = tuple(p for r in reports for p in r.eval_prompts)
    if not pushed:
        return None, []
    sources = (Source(BUILTIN_SOURCE, builtin_prompts()), Source("profiles", pushed))
    try:
        model = train_category_model(sources, categories)
    except TrainingError as err:
        return None, [f"classifier: not trained ({err}); data planes use their built-in model"]
    return model, [training_summary(model)]


def training_summary(model: CategoryModel) -> str:
    """One line for logs and build notes: sources, examples, cross-validated accuracy."""
    t = model.training
    sources = ", ".join(f"{n} {name}" for name, n in t.sources.items())
    accuracy = "n/a" if t.cv_accuracy is None else f"{t.cv_accuracy:.3f} ({t.cv_folds} folds)"
    return (
        f"classifier: trained on {sum(t.sources.values())} prompts ({sources}), "
        f"{len(model.terms)} terms, cross-validated accuracy {accuracy}, "
        f"model_sha256 {model.model_sha256[:12]}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m control_plane.build.category_training --out FILE`: the built-in model (trained on
    the built-in prompts alone), which data planes use for tables that carry no classifier."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    model = train_category_model([Source(BUILTIN_SOURCE, builtin_prompts())], KNOWN_CATEGORIES)
    args.out.write_text(model.model_dump_json(indent=1) + "\n", encoding="utf-8")
    print(training_summary(model))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
