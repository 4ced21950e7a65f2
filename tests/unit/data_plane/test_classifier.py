"""classifier.py + classifier_fit.py: shipped parameters are a fresh fit; accuracy; clear cases."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data_plane.request import classifier_fit as calibration
from data_plane.request.classifier import (
    _IN_GROUPS,
    CATEGORIES,
    FEATURE_NAMES,
    HEAD_CHARS,
    PARAMS_PATH,
    TAIL_CHARS,
    _group_scores,
    _load,
    _split_words,
    classify,
    classify_with,
    features,
    model_from_params,
)

# Measured: 0.783 held-out category accuracy and 0.883 for complexity (60 held-out samples,
# a sixth of them deliberately adversarial: chatty preambles before a short ask, and short
# but hard prompts). The bars leave room for two borderline samples after small edits.
CATEGORY_BAR = 0.75
COMPLEXITY_BAR = 0.85


@pytest.fixture(scope="module")
def fresh() -> dict[str, Any]:
    text = calibration.SAMPLES_PATH.read_text(encoding="utf-8")
    params = calibration.calibrate(calibration.parse_samples(text.splitlines()))
    rendered: dict[str, Any] = json.loads(calibration.render(params, text))
    return rendered


def test_shipped_params_equal_a_fresh_calibration(fresh: dict[str, Any]) -> None:
    shipped = json.loads(PARAMS_PATH.read_text(encoding="utf-8"))
    assert shipped["samples_sha256"] == fresh["samples_sha256"], "samples changed: recalibrate"
    assert shipped["feature_names"] == fresh["feature_names"] == list(FEATURE_NAMES)
    assert shipped["categories"] == fresh["categories"]
    for key in ("l2_category", "l2_complexity", "n_train", "n_held_out"):
        assert shipped["fit"][key] == fresh["fit"][key], key
    for key in ("held_out_category_accuracy", "held_out_complexity_accuracy"):
        assert shipped["fit"][key] == pytest.approx(fresh["fit"][key], abs=0.02), key
    for key in ("category_weights", "category_bias", "complexity_weights", "complexity_bias"):
        np.testing.assert_allclose(shipped[key], fresh[key], rtol=1e-3, atol=1e-5, err_msg=key)


def test_held_out_accuracy_is_above_the_measured_bar(fresh: dict[str, Any]) -> None:
    fit = fresh["fit"]
    assert isinstance(fit, dict)
    assert fit["n_held_out"] >= 50
    assert fit["held_out_category_accuracy"] >= CATEGORY_BAR
    assert fit["held_out_complexity_accuracy"] >= COMPLEXITY_BAR


def test_samples_cover_every_category_and_level() -> None:
    samples = calibration.parse_samples(calibration.SAMPLES_PATH.read_text().splitlines())
    assert len(samples) >= 250
    assert len({s.id for s in samples}) == len(samples)
    for category in CATEGORIES:
        for high in (False, True):
            assert sum(s.category == category and s.high is high for s in samples) >= 25


def test_split_is_stratified_and_deterministic() -> None:
    samples = calibration.parse_samples(calibration.SAMPLES_PATH.read_text().splitlines())
    train, test = calibration.split(samples)
    assert calibration.split(list(reversed(samples))) == (train, test)
    assert not {s.id for s in train} & {s.id for s in test}
    assert {(s.category, s.high) for s in test} == {(s.category, s.high) for s in samples}


def test_parse_samples_rejects_unknown_labels() -> None:
    with pytest.raises(ValueError, match="line 2"):
        calibration.parse_samples(
            [
                '{"id": "a", "category": "chat", "complexity": "low", "text": "x"}',
                '{"id": "b", "category": "poetry", "complexity": "low", "text": "y"}',
            ],
        )
    assert calibration.parse_samples(["", "  "]) == []


@pytest.mark.parametrize(
    ("text", "category"),
    [
        ("hey there! hope you're having a lovely weekend :)", "chat"),
        ("Can you recommend a cozy mystery novel?", "chat"),
        (
            "```python\ndef add(a, b):\n    return a + b\n```\n"
            "Why does this return None sometimes?",
            "code",
        ),
        (
            "Write a Rust function that parses a CSV line into a Vec<String>, "
            "handling quoted fields.",
            "code",
        ),
        ("Solve for x: 5x - 7 = 18", "math"),
        (
            "Compute the integral of x^2 * sin(x) dx and prove your answer by differentiation.",
            "math",
        ),
        (
            "Extract the name, email and phone number from this text and return JSON: "
            '"Reach Dana Wu at dana@wu.dev or 555-0199."',
            "extraction",
        ),
        (
            "Why might a city choose congestion pricing over building more roads? "
            "Compare the trade-offs and risks.",
            "reasoning",
        ),
    ],
)
def test_clear_examples(text: str, category: str) -> None:
    assert classify(text)[0] == category


def test_complexity_orders_clear_cases() -> None:
    easy = classify("thanks!")[1]
    hard = classify(
        "Implement a lock-free bounded MPMC queue in C++17 with std::atomic. It must handle "
        "the ABA problem, avoid false sharing, and include a stress test with 16 producer and "
        "16 consumer threads. Explain the memory ordering for every operation, then derive the "
        "worst-case progress guarantees and compare them with a mutex-based design."
    )[1]
    assert 0.0 <= easy < 0.5 < hard <= 1.0


def test_only_the_window_is_scanned() -> None:
    head, tail = "a" * HEAD_CHARS, "b" * TAIL_CHARS
    middle_a = "```python\ndef f():\n    return 1\n```\n" * 200
    middle_b = "Solve the integral of x^2 dx. Prove it. " * 200
    fa = features(head + middle_a + tail)
    fb = features(head + middle_b + tail)
    # identical except for the total length
    diff = [name for name, a, b in zip(FEATURE_NAMES, fa, fb, strict=True) if a != b]
    assert set(diff) <= {"chars_log"}


def test_degenerate_inputs() -> None:
    # "\ud800": a lone surrogate, which a JSON body may carry as an escape
    for text in ("", " ", "\n\n\n", "🙂" * 10_000, "\x00" * 100, "a" * 1_000_000, "hi \ud800 x"):
        category, complexity = classify(text)
        assert category in CATEGORIES
        assert 0.0 <= complexity <= 1.0
    assert len(features("")) == len(FEATURE_NAMES)


def test_deterministic() -> None:
    text = "Explain why the sky is blue, step by step."
    assert classify(text) == classify(text)


def test_params_for_other_features_are_refused(tmp_path: Path) -> None:
    params = json.loads(PARAMS_PATH.read_text())
    with pytest.raises(ValueError, match="other features"):
        model_from_params({**params, "feature_names": ["x"]})
    stale = tmp_path / "stale.json"
    stale.write_text(json.dumps({**params, "feature_names": ["x"]}))
    assert "stale.json is missing or stale" in str(_load(stale))
    assert "python -m data_plane.request.classifier_fit" in str(_load(tmp_path / "missing.json"))
    model = _load(PARAMS_PATH)
    assert not isinstance(model, str)
    assert classify_with(model, "Solve for x: 2x = 4")[0] == "math"
    with pytest.raises(RuntimeError, match="missing or stale"):
        classify_with(_load(tmp_path / "missing.json"), "hello")


def test_calibration_cli_writes_params(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    samples = tmp_path / "s.jsonl"
    lines = calibration.SAMPLES_PATH.read_text().splitlines()
    samples.write_text("\n".join(lines[::2]) + "\n")  # half the samples: quick, still stratified
    out = tmp_path / "p.json"
    assert calibration.main(["--samples", str(samples), "--out", str(out)]) == 0
    written = json.loads(out.read_text())
    assert written["feature_names"] == list(FEATURE_NAMES)
    assert "held-out accuracy: category" in capsys.readouterr().out
    assert model_from_params(written).classify("hello")[0] in CATEGORIES


@settings(max_examples=300)
@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=300))
def test_ascii_text_splits_the_same_as_bytes_and_as_str(text: str) -> None:
    as_str = _split_words(text, None)
    as_bytes = _split_words(text, text.encode("ascii"))
    assert as_bytes == [w.encode("ascii") for w in as_str]  # type: ignore[union-attr]


def test_word_groups_score_the_same_for_bytes_and_str() -> None:
    text = "Please SOLVE the equation, then explain why: def f(x): return x**2 -- thanks!"
    for ascii_bytes in (None, text.encode("ascii")):
        distinct = set(_split_words(text, ascii_bytes))
        scores = _group_scores(distinct, _IN_GROUPS[ascii_bytes is not None], 8)
        assert scores[4] == pytest.approx(math.log1p(2))  # reasoning: "explain", "why"
        assert scores[0] == pytest.approx(math.log1p(2))  # code syntax: "def", "return"
