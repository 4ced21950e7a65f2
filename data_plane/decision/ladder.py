"""The precision ladder: the order of declared precisions, and its hysteresis state.

PURE: stdlib only. Precision comes from the declared quantization (its number format and bits
per weight), never from measured accuracy: FP32 > FP16 = BF16 > FP8 > INT8 > FP4 > INT4, with a
name that declares nothing known last. The hysteresis state is a value (`LadderState`) that
a decision reads and returns; whoever serves the decision keeps the returned one for the next.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# (pair, category) keys of pairs that load pushed off for that category's requests.
LadderState = frozenset[tuple[str, str]]
NO_STEPS: LadderState = frozenset()

# The first pattern that matches a lower-case quantization name gives its bits per weight.
_BITS: tuple[tuple[int, re.Pattern[str]], ...] = (
    (32, re.compile(r"(?:fp|float|f)32")),
    (16, re.compile(r"(?:bf|fp|float|f)16|bfloat|half")),
    (8, re.compile(r"fp8|int8|w8a|(?<!\d)8bit|q8|e4m3|e5m2")),
    (4, re.compile(r"int4|fp4|nf4|w4a|awq|gptq|(?<!\d)4bit|q4")),
)
# Integer formats; at equal bits a floating-point format counts as more precise.
_INTEGER = re.compile(r"int\d|w\da\d|awq|gptq|(?<!\d)\dbit|q\d")


def precision_key(quantization: str) -> tuple[int, int]:
    """(-bits, 1 for an integer format else 0): the smaller key is the more precise.

    >>> [precision_key(q) for q in ("fp16", "fp8", "int8-w8a8", "awq-int4", "exotic")]
    [(-16, 0), (-8, 0), (-8, 1), (-4, 1), (0, 0)]
    """
    name = quantization.lower()
    bits = next((b for b, pattern in _BITS if pattern.search(name)), 0)
    return (-bits, 1 if _INTEGER.search(name) else 0)


def ladder_ranks(quantizations: Iterable[str]) -> dict[str, int]:
    """quantization -> its rung: 0 = the most precise declared precision among them, then
    1, 2, ... (dense: equal format and bits share a rung)."""
    names = set(quantizations)
    keys = sorted({precision_key(q) for q in names})
    rung = {key: i for i, key in enumerate(keys)}
    return {q: rung[precision_key(q)] for q in names}


def next_state(
    state: LadderState, category: str, fitted: Iterable[str], pushed_off: Iterable[str]
) -> LadderState:
    """The state after one decision for `category`: pairs whose prediction fitted the budget
    with the hysteresis margin are back on the ladder, pairs that load made too slow are off.
    Returns `state` itself when nothing changed (no allocation on the steady path)."""
    back = {(p, category) for p in fitted} & state
    off = {(p, category) for p in pushed_off} - state
    if not back and not off:
        return state
    return (state - back) | off
