"""contracts/category_model.py: the shared feature space and the wire checks on models and
labelled prompts (what the control plane accepts with a pushed profile)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from contracts.category_model import (
    HEAD_CHARS,
    TAIL_CHARS,
    CategoryModel,
    LabelledPrompt,
    parameters_sha256,
    prompt_terms,
    prompt_window,
)
from contracts.policy import Policy, PolicyError, load_policy
from contracts.profile_report import ProfileReport
from tests.unit.control_plane.factories import report_data


def test_prompt_terms_are_words_word_pairs_and_punctuation() -> None:
    assert prompt_terms("Why does x = f(2)?") == {
        "why", "does", "x", "f", "2",
        "why does", "does x", "x f", "f 2",
        "=", "(", ")", "?",
    }  # fmt: skip
    assert prompt_terms("") == set()


def test_long_prompts_keep_their_head_and_tail() -> None:
    text = "a" * HEAD_CHARS + "MIDDLE" * 500 + "b" * TAIL_CHARS
    assert prompt_window(text) == "a" * HEAD_CHARS + "\n" + "b" * TAIL_CHARS
    assert "middle" not in " ".join(prompt_terms(text))


def _model_data(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "features": "prompt-terms-v1",
        "categories": ["chat", "math"],
        "terms": ["hello", "solve"],
        "idf": [1.2, 1.5],
        "weights": [[1.0, -1.0], [-1.0, 1.0]],
        "bias": [0.0, 0.1],
        "complexity_weights": [0.5, 1.5],
        "complexity_bias": -1.0,
        "training": {"library": "x", "examples": {}, "sources": {}, "cv_folds": 0},
    }
    data.update(changes)
    return {**data, "model_sha256": parameters_sha256(data)}


def test_a_consistent_model_validates_and_its_hash_covers_the_parameters() -> None:
    model = CategoryModel.model_validate(_model_data())
    assert model.model_sha256 == parameters_sha256(model)
    for change in ({"bias": [0.0, 0.2]}, {"complexity_bias": -0.5}):
        assert _model_data(**change)["model_sha256"] != model.model_sha256


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"idf": [1.0]}, "one entry per term"),
        ({"complexity_weights": [1.0]}, "one entry per term"),
        ({"weights": [[1.0], [1.0]]}, "one value per category"),
        ({"terms": ["a", "a"]}, "terms must be unique"),
        ({"terms": ["a", "\ud800"]}, "lone surrogates"),
        ({"categories": ["chat"], "bias": [0.0], "weights": [[1.0], [1.0]]}, "at least 2"),
    ],
)
def test_inconsistent_models_are_refused(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        CategoryModel.model_validate(_model_data(**changes))


def test_a_tampered_model_fails_its_hash() -> None:
    data = _model_data()
    data["weights"] = [[9.0, -1.0], [-1.0, 1.0]]
    with pytest.raises(ValidationError, match="model_sha256 does not match"):
        CategoryModel.model_validate(data)


@pytest.mark.parametrize(
    ("prompt", "where"),
    [
        ({"text": "", "category": "math"}, "eval_prompts.0.text"),
        ({"text": "x" * 40_000, "category": "math"}, "eval_prompts.0.text"),
        ({"text": "bad \ud800", "category": "math"}, "eval_prompts.0.text"),
        ({"text": "2+2", "category": "Not A Category"}, "eval_prompts.0.category"),
    ],
)
def test_pushed_eval_prompts_are_validated_at_the_boundary(
    prompt: dict[str, Any], where: str
) -> None:
    data = report_data()
    data["eval_prompts"] = [prompt]
    with pytest.raises(ValidationError) as caught:
        ProfileReport.model_validate(data)
    assert [".".join(map(str, e["loc"])) for e in caught.value.errors()] == [where]


def test_a_labelled_prompt_round_trips() -> None:
    p = LabelledPrompt(text="Solve 2x = 4", category="math")
    assert LabelledPrompt.model_validate_json(p.model_dump_json()) == p


def test_the_policys_doubt_category_must_be_one_of_its_categories() -> None:
    assert Policy.model_validate({"doubt_category": "math"}).doubt_category == "math"
    with pytest.raises(PolicyError, match="doubt_category 'poetry' is not in categories"):
        load_policy({"doubt_category": "poetry"})
    with pytest.raises(PolicyError, match="category_confidence"):
        load_policy({"category_confidence": 1.5})
