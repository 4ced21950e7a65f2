"""Fit the classifier's parameters from the labelled prompts.

Run as `python -m data_plane.request.classifier_fit`.

Deterministic: a fixed stratified train/held-out split, L2-regularised multinomial logistic
regression for the category and binary logistic regression for complexity (scipy L-BFGS from
zero weights), the L2 strength chosen by 5-fold cross-validation on the train split only.
Writes `classifier_params.json` next to the classifier and prints held-out accuracy. The fit
is pure (`calibrate`); only `main` touches files.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy.optimize import minimize

from contracts.category_model import BUILTIN_PROMPTS_PATH
from data_plane.request.classifier import CATEGORIES, FEATURE_NAMES, PARAMS_PATH, features

SAMPLES_PATH = BUILTIN_PROMPTS_PATH  # shared with the control plane's category training
L2_GRID = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0)
HELD_OUT_EVERY = 5  # every 5th sample of each (category, complexity) stratum is held out
FOLDS = 5
Array = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Sample:
    id: str
    category: str
    high: bool  # complexity label: "high" -> True, "low" -> False
    text: str


def parse_samples(lines: Sequence[str]) -> list[Sample]:
    samples = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        doc = json.loads(line)
        if doc["category"] not in CATEGORIES or doc["complexity"] not in ("low", "high"):
            raise ValueError(f"line {number}: unknown category or complexity label")
        samples.append(Sample(doc["id"], doc["category"], doc["complexity"] == "high", doc["text"]))
    return samples


def split(samples: Sequence[Sample]) -> tuple[list[Sample], list[Sample]]:
    """Stratified by (category, complexity), by id order: every HELD_OUT_EVERY-th is held out."""
    train: list[Sample] = []
    test: list[Sample] = []
    strata: dict[tuple[str, bool], list[Sample]] = {}
    for s in sorted(samples, key=lambda s: s.id):
        strata.setdefault((s.category, s.high), []).append(s)
    for members in strata.values():
        for i, s in enumerate(members):
            (test if i % HELD_OUT_EVERY == HELD_OUT_EVERY // 2 else train).append(s)
    return train, test


def _softmax_fit(x: Array, y: npt.NDArray[np.int64], classes: int, l2: float) -> Array:
    """Weights (classes, features + 1) minimising mean cross-entropy + l2/2 |W|^2 (no bias)."""
    n, d = x.shape
    xb = np.hstack([x, np.ones((n, 1))])
    onehot = np.eye(classes)[y]
    mask = np.ones((classes, d + 1))
    mask[:, -1] = 0.0

    def loss(flat: Array) -> tuple[float, Array]:
        w = flat.reshape(classes, d + 1)
        logits = xb @ w.T
        logits -= logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        p /= p.sum(axis=1, keepdims=True)
        value = -np.mean(np.log(p[np.arange(n), y] + 1e-300)) + 0.5 * l2 * np.sum((w * mask) ** 2)
        grad = (p - onehot).T @ xb / n + l2 * w * mask
        return float(value), grad.ravel()

    # Tight tolerances: the problem is strictly convex, so a converged fit is the same optimum
    # on any machine (the shipped parameters are compared with a fresh run).
    result = minimize(
        loss,
        np.zeros(classes * (d + 1)),
        jac=True,
        method="L-BFGS-B",
        options={"maxiter": 10_000, "ftol": 1e-15, "gtol": 1e-10},
    )
    return np.asarray(result.x, dtype=np.float64).reshape(classes, d + 1)


def _predict(w: Array, x: Array) -> npt.NDArray[np.int64]:
    return np.asarray(np.argmax(x @ w[:, :-1].T + w[:, -1], axis=1), dtype=np.int64)


def _cv_accuracy(x: Array, y: npt.NDArray[np.int64], classes: int, l2: float) -> float:
    folds = np.arange(len(y)) % FOLDS
    correct = 0
    for k in range(FOLDS):
        w = _softmax_fit(x[folds != k], y[folds != k], classes, l2)
        correct += int(np.sum(_predict(w, x[folds == k]) == y[folds == k]))
    return correct / len(y)


def _fit(x: Array, y: npt.NDArray[np.int64], classes: int) -> tuple[Array, float]:
    """Best L2 by cross-validated accuracy (ties: the stronger regularisation), then refit."""
    scores = [(_cv_accuracy(x, y, classes, l2), l2) for l2 in L2_GRID]
    best = max(scores, key=lambda s: (s[0], s[1]))[1]
    return _softmax_fit(x, y, classes, best), best


def _fold(w: Array, mean: Array, std: Array) -> tuple[Array, Array]:
    """Weights on standardised inputs -> weights on raw features (so inference skips scaling)."""
    weights = w[:, :-1] / std
    return weights, w[:, -1] - weights @ mean


def _round(values: Array) -> list[Any]:
    return np.round(values, 8).tolist()  # type: ignore[no-any-return]


def calibrate(samples: Sequence[Sample]) -> dict[str, Any]:
    """The parameters `classifier.model_from_params` reads, plus held-out figures."""
    train, test = split(samples)
    x_train = np.array([features(s.text) for s in train])
    x_test = np.array([features(s.text) for s in test])
    mean = x_train.mean(axis=0)
    std = np.where(x_train.std(axis=0) > 1e-12, x_train.std(axis=0), 1.0)
    z_train, z_test = (x_train - mean) / std, (x_test - mean) / std
    y_cat = np.array([CATEGORIES.index(s.category) for s in train], dtype=np.int64)
    y_high = np.array([int(s.high) for s in train], dtype=np.int64)
    w_cat, l2_cat = _fit(z_train, y_cat, len(CATEGORIES))
    w_high, l2_high = _fit(z_train, y_high, 2)
    # A 2-class softmax is a logistic regression on the difference of the two rows.
    w_cx = (w_high[1] - w_high[0])[None, :]
    cat_w, cat_b = _fold(w_cat, mean, std)
    cx_w, cx_b = _fold(w_cx, mean, std)
    test_cat = np.array([CATEGORIES.index(s.category) for s in test])
    test_high = np.array([int(s.high) for s in test])
    cat_acc = float(np.mean(_predict(w_cat, z_test) == test_cat))
    cx_acc = float(np.mean(((z_test @ w_cx[0, :-1] + w_cx[0, -1]) > 0).astype(int) == test_high))
    return {
        "feature_names": list(FEATURE_NAMES),
        "categories": list(CATEGORIES),
        "category_weights": _round(cat_w),
        "category_bias": _round(cat_b),
        "complexity_weights": _round(cx_w[0]),
        "complexity_bias": round(float(cx_b[0]), 8),
        "fit": {
            "l2_category": l2_cat,
            "l2_complexity": l2_high,
            "n_train": len(train),
            "n_held_out": len(test),
            "held_out_category_accuracy": round(cat_acc, 4),
            "held_out_complexity_accuracy": round(cx_acc, 4),
        },
    }


def render(params: dict[str, Any], samples_text: str) -> str:
    digest = hashlib.sha256(samples_text.encode("utf-8")).hexdigest()
    return json.dumps({**params, "samples_sha256": digest}, indent=1) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m data_plane.request.classifier_fit", description=__doc__
    )
    parser.add_argument("--samples", type=Path, default=SAMPLES_PATH)
    parser.add_argument("--out", type=Path, default=PARAMS_PATH)
    args = parser.parse_args(argv)
    text = args.samples.read_text(encoding="utf-8")
    params = calibrate(parse_samples(text.splitlines()))
    args.out.write_text(render(params, text), encoding="utf-8")
    fit = params["fit"]
    print(
        f"wrote {args.out}: {fit['n_train']} train / {fit['n_held_out']} held-out samples; "
        f"held-out accuracy: category {fit['held_out_category_accuracy']:.3f}, "
        f"complexity {fit['held_out_complexity_accuracy']:.3f} "
        f"(l2 {fit['l2_category']} / {fit['l2_complexity']})"
    )
    return 0


if __name__ == "__main__":  # pragma: no cover - exercised through main()
    sys.exit(main())
