"""The precision ladder: the order of declared precisions, and its hysteresis state.

PURE. Precision comes from the declared quantization (its number format and bits per weight),
never from measured accuracy: FP32 > FP16 = BF16 > FP8 > INT8 > FP4 > INT4, read as the table
build reads it (`contracts/precision_names.py`). The hysteresis state is a value
(`LadderState`) that a decision reads and returns; whoever serves the decision keeps the
returned one for the next.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from contracts.precision_names import UnreadablePrecisionError, weight_format

# (pair, category) keys of pairs that load pushed off for that category's requests.
LadderState = frozenset[tuple[str, str]]
NO_STEPS: LadderState = frozenset()
_DECLARED = re.compile(r"^(fp|bf|int)(\d+)$")


def precision_key(quantization: str, declared: str | None = None) -> tuple[int, int]:
    """(-bits, 1 for an integer format else 0): the smaller key is the more precise. The
    format is `declared` (the table entry's `precision_format`) when given, else read from the
    name as the table build reads it (`contracts/precision_names.py`); a table built before
    the build refused unreadable names may carry one: it sorts last, (0, 0).

    >>> [precision_key(q) for q in ("fp16", "fp8", "int8-w8a8", "awq-int4", "int4-fp8kv")]
    [(-16, 0), (-8, 0), (-8, 1), (-4, 1), (-4, 1)]
    """
    fmt = declared
    if fmt is None:
        try:
            fmt = weight_format(quantization)
        except UnreadablePrecisionError:
            return (0, 0)
    match = _DECLARED.match(fmt)
    if match is None:
        return (0, 0)
    return (-int(match.group(2)), 1 if match.group(1) == "int" else 0)


def ladder_ranks(
    quantizations: Iterable[str], declared: Mapping[str, str | None] | None = None
) -> dict[str, int]:
    """quantization -> its rung: 0 = the most precise declared precision among them, then
    1, 2, ... (dense: equal format and bits share a rung). `declared`: quantization -> the
    table's declared format, where it has one."""
    names = set(quantizations)
    formats = declared or {}
    key = {q: precision_key(q, formats.get(q)) for q in names}
    rung = {k: i for i, k in enumerate(sorted(set(key.values())))}
    return {q: rung[key[q]] for q in names}


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
