"""request/category.py: the shipped model classifies as the contract and scikit-learn say, and
doubt routes under the strictest floor."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.linear_model import LogisticRegression

from contracts.category_model import (
    HEAD_CHARS,
    TAIL_CHARS,
    CategoryModel,
    parameters_sha256,
    prompt_terms,
)
from control_plane.build.category_training import (
    BUILTIN_SOURCE,
    COMPLEXITY_C,
    Source,
    _fit,
    builtin_complexity,
    builtin_prompts,
    train_category_model,
)
from data_plane.domain import Budget, CategoryDefaults, CategoryDoubt
from data_plane.errors import InvalidBudget
from data_plane.request.body import parse_request_body
from data_plane.request.category import (
    BUILTIN,
    check_category,
    classify_text,
    compile_classifier,
    decide_category,
    plausible_categories,
    request_facts,
)
from data_plane.request.prompt_scan import scan_prompt
from tests.support.team_prompts import LEGAL_HELD_OUT, TEAM_CATEGORIES, legal_prompts
from tests.unit.data_plane.tables import fleet

CATS = ("chat", "code", "math", "reasoning")


def _defaults(**floors: float) -> dict[str, CategoryDefaults]:
    return {c: CategoryDefaults(f, None, None, 256) for c, f in floors.items()}


def _model_over(terms: set[str]) -> CategoryModel:
    """A model whose vocabulary is exactly `terms` (weights 0): to read what it finds."""
    ordered = sorted(terms)
    data = {
        "features": "prompt-terms-v1",
        "categories": ["a", "b"],
        "terms": ordered,
        "idf": [1.0] * len(ordered),
        "weights": [[0.0, 0.0]] * len(ordered),
        "bias": [0.0, 0.0],
        "complexity_weights": [0.0] * len(ordered),
        "complexity_bias": 0.0,
        "training": {"library": "test", "examples": {}, "sources": {}, "cv_folds": 0},
    }
    return CategoryModel.model_validate({**data, "model_sha256": parameters_sha256(data)})


_PIECES = [*"ab cd-+_(){}.,;:?!'\"`=*/\\|#$%&@~^\n\t\x1c\x1f", "é", "ß", "文", "\ud800", "x y"]
_TEXT = st.lists(st.sampled_from(_PIECES), max_size=400).map("".join)


@settings(max_examples=300, deadline=None)
@given(text=_TEXT, decoys=st.sets(st.text(min_size=1, max_size=6), max_size=5))
def test_the_fast_lookup_finds_exactly_the_contracts_terms(text: str, decoys: set[str]) -> None:
    """ASCII prompts are read as bytes and word pairs as tuples; the set is the contract's
    (a model's terms are valid Unicode, so words with a lone surrogate never match)."""
    terms = {t for t in prompt_terms(text) if t.isascii() or "\ud800" not in t}
    decoys = {
        d for d in decoys if d.encode("utf-8", "surrogatepass").decode("utf-8", "ignore") == d
    }
    model = compile_classifier(_model_over(terms | decoys))
    found = {model.terms[i] for i in model.found_rows(scan_prompt(text))}
    assert found == terms


@pytest.mark.parametrize("n", [10, HEAD_CHARS + TAIL_CHARS + 1, 40_000])
def test_long_prompts_are_read_through_the_same_window(n: int) -> None:
    text = ("why does the build fail { x = 1 } " * 2000)[:n] + " and which sorting is stable?"
    model = compile_classifier(_model_over(prompt_terms(text) | {"never"}))
    assert {model.terms[i] for i in model.found_rows(scan_prompt(text))} == prompt_terms(text)


def test_probabilities_match_scikit_learn() -> None:
    """The exported arrays give scikit-learn's own probabilities (to the export's rounding)."""
    sources = [Source(BUILTIN_SOURCE, builtin_prompts()), Source("team", legal_prompts())]
    model = compile_classifier(train_category_model(sources, TEAM_CATEGORIES))
    prompts = [p for s in sources for p in s.prompts]
    fitted = _fit([p.text for p in prompts], [p.category for p in prompts])
    texts = [*LEGAL_HELD_OUT, "Say hello.", "", "def f(x): return x * 2  # why?", "2 + 2 = ?"]
    expected = fitted.predict_proba(texts)
    assert list(fitted.classes_) == list(model.categories)
    for text, row in zip(texts, expected, strict=True):
        assert model.probabilities(text) == pytest.approx(list(row), abs=1e-4)
    # The complexity head: scikit-learn's P(high) on the same terms.
    labelled = builtin_complexity()
    head = LogisticRegression(C=COMPLEXITY_C, max_iter=5000).fit(
        fitted.named_steps["terms"].transform([t for t, _ in labelled]), [h for _, h in labelled]
    )
    p_high = head.predict_proba(fitted.named_steps["terms"].transform(texts))[:, 1]
    for text, p in zip(texts, p_high, strict=True):
        assert classify_text(model, text)[1] == pytest.approx(float(p), abs=1e-4)


def test_complexity_rises_with_a_demanding_prompt() -> None:
    easy = classify_text(BUILTIN, "thanks!")[1]
    hard = classify_text(
        BUILTIN,
        "Prove that the amortized complexity of the lock-free queue is optimal, derive the "
        "invariant rigorously and handle every concurrency edge case.",
    )[1]
    assert 0.0 <= easy < 0.5 < hard <= 1.0


def test_the_builtin_model_classifies_clear_prompts() -> None:
    def top(text: str) -> str:
        p = BUILTIN.probabilities(text)
        return BUILTIN.categories[p.index(max(p))]

    assert top("Say hi.") == "chat"
    assert top("Solve for x: 3x + 5 = 20") == "math"
    assert top("Extract every date from this email as a JSON array.") == "extraction"


def test_a_sure_classifier_decides_alone() -> None:
    category, doubt = decide_category(CATS, [0.7, 0.1, 0.1, 0.1], _defaults(chat=0.5), 0.6, None)
    assert (category, doubt) == ("chat", None)


def test_abstention_picks_the_stricter_floor() -> None:
    """chat is more likely, but math cannot be ruled out and has the stricter floor."""
    known = _defaults(chat=0.5, code=0.95, math=0.9, reasoning=0.7)
    category, doubt = decide_category(CATS, [0.45, 0.05, 0.35, 0.15], known, 0.6, None)
    assert category == "math"
    assert doubt == CategoryDoubt("chat", 0.45, ("chat", "math"), "math")
    assert doubt.reason_suffix == "; category_uncertain: routed as math (plausible chat,math)"
    # With more confidence asked for, reasoning cannot be ruled out either; math stays stricter.
    assert decide_category(CATS, [0.45, 0.05, 0.35, 0.15], known, 0.9, None)[0] == "math"
    # code (0.95) is plausible only when its probability is needed to reach the confidence.
    assert decide_category(CATS, [0.45, 0.16, 0.35, 0.04], known, 0.9, None)[0] == "code"


def test_equal_floors_go_to_the_more_probable_category() -> None:
    known = _defaults(chat=0.8, code=0.8, math=0.8, reasoning=0.8)
    assert decide_category(CATS, [0.2, 0.25, 0.3, 0.25], known, 0.6, None)[0] == "math"


def test_the_policys_doubt_category_wins_under_doubt() -> None:
    known = _defaults(chat=0.5, code=0.95, math=0.9, reasoning=0.7)
    category, doubt = decide_category(CATS, [0.45, 0.05, 0.35, 0.15], known, 0.6, "reasoning")
    assert category == "reasoning"
    assert doubt is not None
    assert doubt.routed_as == "reasoning"


def test_plausible_categories_hold_the_confidence() -> None:
    assert plausible_categories(CATS, [0.1, 0.2, 0.3, 0.4], 0.6) == ("reasoning", "math")
    assert plausible_categories(CATS, [0.1, 0.2, 0.3, 0.4], 0.99) == (
        "reasoning",
        "math",
        "code",
        "chat",
    )


def test_an_unknown_category_header_is_a_400_naming_the_allowed_values() -> None:
    known = _defaults(chat=0.5, math=0.9)
    check_category(None, known)
    check_category("math", known)
    with pytest.raises(InvalidBudget) as caught:
        check_category("poetry", known)
    assert caught.value.param == "X-Task-Category"
    assert "'poetry'" in str(caught.value)
    assert "allowed values: chat, math" in str(caught.value)


def test_request_facts_take_the_header_else_the_classifier() -> None:
    table = fleet({"categories": {"chat": {"min_accuracy": 0.5}, "math": {"min_accuracy": 0.9}}})
    raw = b'{"model": "auto", "messages": [{"role": "user", "content": "Say hi."}]}'
    parsed = parse_request_body(raw, "chat")
    by_header = request_facts(parsed, table, Budget(category="math"))
    assert (by_header.category, by_header.doubt) == ("math", None)
    classified = request_facts(parsed, table, Budget())
    assert (classified.category, classified.doubt) == ("chat", None)
    assert 0.0 <= classified.complexity <= 1.0
    allowed = "allowed values: chat, code, extraction, math, reasoning"
    with pytest.raises(InvalidBudget, match=allowed):
        request_facts(parsed, table, Budget(category="poetry"))


def test_a_confidence_of_zero_never_abstains() -> None:
    known = _defaults(chat=0.5, code=0.95, math=0.9, reasoning=0.7)
    assert decide_category(CATS, [0.25, 0.25, 0.25, 0.25], known, 0.0, None) == ("chat", None)
