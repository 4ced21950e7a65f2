"""category_training.py: the classifier learned from pushed eval prompts, shipped in the table."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sklearn.model_selection import StratifiedKFold
from threadpoolctl import threadpool_info

from contracts.category_model import LabelledPrompt, parameters_sha256
from contracts.policy import Policy
from contracts.profile_report import ProfileReport
from control_plane.build.category_training import (
    BUILTIN_SOURCE,
    TRAINING_THREADS,
    Source,
    TrainingError,
    _fit,
    builtin_prompts,
    train_category_model,
    with_training_threads,
)
from control_plane.build.table import build
from tests.support.team_prompts import LEGAL_HELD_OUT, TEAM_CATEGORIES, legal_prompts
from tests.unit.control_plane.factories import report_data

REPO = Path(__file__).parents[3]
NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
TEAM_POLICY = Policy.model_validate({"categories": {c: {} for c in TEAM_CATEGORIES}})


def _report(quantization: str, prompts: tuple[LabelledPrompt, ...]) -> ProfileReport:
    data = report_data("fam", quantization)
    data["eval_prompts"] = [p.model_dump() for p in prompts]
    return ProfileReport.model_validate(data)


def _profiler_eval_prompts() -> list[LabelledPrompt]:
    """The project's labelled profiler eval items: each prompt or last user turn."""
    prompts = []
    for path in sorted((REPO / "profiler" / "evalsets").glob("*.jsonl")):
        if path.stem.endswith("-generated"):
            continue  # the hand-written items; the generated ones are templated
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                doc = json.loads(line)
                users = [m["content"] for m in doc.get("messages", []) if m["role"] == "user"]
                text = doc.get("prompt") or users[-1]
                prompts.append(LabelledPrompt(text=text, category=doc["category"]))
    return prompts


def test_pushed_eval_prompts_train_the_tables_classifier() -> None:
    """A category only the team's pushed prompts define is learned, shipped and reported."""
    reports = [_report("fp16", legal_prompts()), _report("int4", legal_prompts()[:4])]
    made = build(reports, TEAM_POLICY, NOW)
    model = made.table.classifier
    assert model is not None
    assert model.categories == tuple(sorted(TEAM_CATEGORIES))
    t = model.training
    assert t.sources == {BUILTIN_SOURCE: len(builtin_prompts()), "profiles": 16}  # duplicates once
    assert t.examples["legal"] == 16
    assert "scikit-learn" in t.library
    assert any(w.startswith("classifier: trained on 308 prompts") for w in made.warnings)
    # The confusion matrix counts each training prompt once, held out; accuracy is its trace.
    assert sum(map(sum, t.confusion)) == sum(t.examples.values())
    assert [sum(row) for row in t.confusion] == [t.examples[c] for c in model.categories]
    trace = sum(t.confusion[i][i] for i in range(len(model.categories)))
    assert t.cv_accuracy == round(trace / sum(t.examples.values()), 4)
    assert t.confusion[model.categories.index("legal")][model.categories.index("legal")] >= 12


def test_the_table_without_eval_prompts_carries_no_classifier() -> None:
    made = build([_report("fp16", ())], Policy(), NOW)
    assert made.table.classifier is None
    assert not any(w.startswith("classifier") for w in made.warnings)


def test_training_is_deterministic_and_hashed() -> None:
    sources = [Source(BUILTIN_SOURCE, builtin_prompts()), Source("team", legal_prompts())]
    a = train_category_model(sources, TEAM_CATEGORIES)
    b = train_category_model(list(reversed(sources)), TEAM_CATEGORIES)
    assert a.model_sha256 == b.model_sha256 == parameters_sha256(a)
    first = build([_report("fp16", legal_prompts())], TEAM_POLICY, NOW).table
    again = build([_report("fp16", legal_prompts())], TEAM_POLICY, NOW).table
    assert first.content_sha256 == again.content_sha256
    assert first.classifier is not None
    assert len(first.model_dump_json()) < 200_000  # small enough to travel in the table


def test_categories_outside_the_policy_are_not_learned() -> None:
    model = train_category_model(
        [Source(BUILTIN_SOURCE, builtin_prompts()), Source("team", legal_prompts())],
        ("chat", "math"),
    )
    assert model.categories == ("chat", "math")
    with pytest.raises(TrainingError, match="at least 2"):
        train_category_model([Source("team", legal_prompts())], ("legal", "chat"))


def test_the_builtin_model_is_a_fresh_fit_of_the_builtin_prompts() -> None:
    """data_plane/request/category_model.json is what
    `python -m control_plane.build.category_training` writes."""
    shipped = json.loads((REPO / "data_plane/request/category_model.json").read_text())
    categories = ("chat", "extraction", "code", "math", "reasoning")
    model = train_category_model([Source(BUILTIN_SOURCE, builtin_prompts())], categories)
    assert shipped["model_sha256"] == model.model_sha256


def test_held_out_accuracy_on_the_profiler_eval_prompts() -> None:
    """The project's 125 labelled eval prompts, 5-fold: each fold is predicted by a model
    trained on the built-in prompts plus the other folds, never on itself (the old
    33-feature model got 86/125 on them). Also: trained on the built-in prompts alone."""
    evals = _profiler_eval_prompts()
    assert len(evals) == 125
    texts = [p.text for p in evals]
    labels = [p.category for p in evals]
    base = builtin_prompts()
    hits = 0
    splitter = StratifiedKFold(n_splits=5, shuffle=True, random_state=0)
    for train, test in splitter.split(texts, labels):
        fitted = _fit(
            [p.text for p in base] + [texts[i] for i in train],
            [p.category for p in base] + [labels[i] for i in train],
        )
        predicted = fitted.predict([texts[i] for i in test])
        hits += sum(str(p) == labels[i] for p, i in zip(predicted, test, strict=True))
    assert hits >= 105  # measured 106/125 (85%)
    alone = _fit([p.text for p in base], [p.category for p in base]).predict(texts)
    assert sum(str(p) == t for p, t in zip(alone, labels, strict=True)) >= 70  # measured 76


def test_a_team_category_generalises_to_new_prompts() -> None:
    model_sources = [Source(BUILTIN_SOURCE, builtin_prompts()), Source("team", legal_prompts())]
    train_category_model(model_sources, TEAM_CATEGORIES)
    fitted = _fit(
        [p.text for s in model_sources for p in s.prompts],
        [p.category for s in model_sources for p in s.prompts],
    )
    assert list(fitted.predict(list(LEGAL_HELD_OUT))) == ["legal"] * len(LEGAL_HELD_OUT)


def test_training_limits_every_blas_and_openmp_pool_and_restores_them() -> None:
    """One thread per pool while the classifier trains (docs/classifier.md "Threads"); the
    rest of the process keeps its pools as they were."""
    before = {(p["filepath"], p["num_threads"]) for p in threadpool_info()}
    inside = with_training_threads(threadpool_info)
    assert {p["internal_api"] for p in inside} >= {"openblas", "openmp"}  # numpy's, sklearn's
    assert {p["num_threads"] for p in inside} == {TRAINING_THREADS}
    assert {(p["filepath"], p["num_threads"]) for p in threadpool_info()} == before
