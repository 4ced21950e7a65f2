"""Precision of a quantization, inferred from its name, and the precision order within a family.

PURE: stdlib only. Bits are a tie-breaker after measured accuracy (see `precision_sort_key`).
"""

from __future__ import annotations

import re

# Checked in this order; the first pattern that matches a quantization name gives its bits.
# fp32 > bf16 = fp16 > fp8 = int8 > int4; names that match nothing count as 0 bits (least
# precise), so an unknown scheme never outranks a known one on a tie in accuracy.
_BITS_PATTERNS: tuple[tuple[int, re.Pattern[str]], ...] = (
    (32, re.compile(r"(?:fp|float|f)32")),
    (16, re.compile(r"(?:bf|fp|float|f)16|bfloat|half")),
    (8, re.compile(r"fp8|int8|w8a|(?<!\d)8bit|q8|e4m3|e5m2")),
    (4, re.compile(r"int4|fp4|nf4|w4a|awq|gptq|(?<!\d)4bit|q4")),
)


def quantization_bits(quantization: str) -> int:
    """Bits per weight a quantization name implies (32, 16, 8 or 4), or 0 when unknown.

    >>> [quantization_bits(q) for q in ("bf16", "fp8", "int8-w8a8", "awq-int4", "exotic")]
    [16, 8, 8, 4, 0]
    """
    name = quantization.lower()
    for bits, pattern in _BITS_PATTERNS:
        if pattern.search(name):
            return bits
    return 0


def precision_sort_key(
    pair: str, quantization: str, mean_accuracy: float
) -> tuple[float, int, str]:
    """Sort key that puts the most precise pair of a family first.

    Mean accuracy descending, then bits descending, then the pair name (a stable tie-break).
    """
    return (-mean_accuracy, -quantization_bits(quantization), pair)
