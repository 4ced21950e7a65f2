"""prompt_scan.py: the window, the two word splits, and inputs a JSON body can carry."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.category_model import HEAD_CHARS, TAIL_CHARS, prompt_terms
from data_plane.request.category import BUILTIN, classify_text
from data_plane.request.prompt_scan import scan_prompt, split_words


@settings(max_examples=300)
@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=300))
def test_ascii_text_splits_the_same_as_bytes_and_as_str(text: str) -> None:
    as_str = split_words(text, None)
    as_bytes = split_words(text, text.encode("ascii"))
    assert as_bytes == [w.encode("ascii") for w in as_str]  # type: ignore[union-attr]


@settings(max_examples=200)
@given(st.text(max_size=400))
def test_the_scan_reads_the_words_the_contract_defines(text: str) -> None:
    scan = scan_prompt(text)
    words = {w.decode() if isinstance(w, bytes) else w for w in scan.words}
    assert words <= prompt_terms(text)


def test_only_the_window_is_scanned() -> None:
    head, tail = "a " * (HEAD_CHARS // 2), "b " * (TAIL_CHARS // 2)
    one = scan_prompt(head + "```python\ndef f():\n    return 1\n```\n" * 200 + tail)
    two = scan_prompt(head + "Solve the integral of x^2 dx. Prove it. " * 200 + tail)
    assert one.window == two.window
    assert one.chars != two.chars


def test_degenerate_inputs_classify() -> None:
    # "\ud800": a lone surrogate, which a JSON body may carry as an escape
    for text in ("", " ", "\n\n\n", "🙂" * 10_000, "\x00" * 100, "a" * 1_000_000, "hi \ud800 x"):
        probabilities, complexity = classify_text(BUILTIN, text)
        assert abs(sum(probabilities) - 1.0) < 1e-9
        assert 0.0 <= complexity <= 1.0


def test_deterministic() -> None:
    text = "Explain why the sky is blue, step by step."
    assert classify_text(BUILTIN, text) == classify_text(BUILTIN, text)
