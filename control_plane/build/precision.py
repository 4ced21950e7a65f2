"""Precision of a pair from what it is: its declared weight format, never its measured accuracy.

PURE. The order is fp32 > bf16 = fp16 > fp8 > int8 > int4 (more bits first; at equal bits a
floating-point format before an integer one). The format is read from the quantization name
(`contracts/precision_names.py`, which the data plane's precision ladder reads too); the
policy's `precision_formats` declares it for names it cannot read (e.g. `{"ternary": "int2"}`),
and the table build refuses a name neither declares. Measured accuracy is noise at eval-set
sizes (docs/accuracy.md) and has no say in the order: the order decides the savings baselines
and where the quality guard escalates.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import NamedTuple

from contracts.precision_names import UnreadablePrecisionError, weight_format

_DECLARED = re.compile(r"^(fp|bf|int)(\d+)$")


class Precision(NamedTuple):
    """A comparable precision: more bits first, then floating point before integer."""

    bits: int
    floating: bool


UNKNOWN = Precision(0, False)


def declared_format(quantization: str, overrides: Mapping[str, str] | None = None) -> str | None:
    """The weight format a quantization name declares (`fp16`, `int4`, ...), or None.

    >>> [declared_format(q) for q in ("bf16", "fp8-dynamic", "int8-w8a8", "awq-int4", "exotic")]
    ['bf16', 'fp8', 'int8', 'int4', None]
    """
    if overrides and quantization in overrides:
        return overrides[quantization]
    try:
        return weight_format(quantization)
    except UnreadablePrecisionError:
        return None


def format_problem(quantization: str, overrides: Mapping[str, str] | None = None) -> str | None:
    """Why no weight format can be read from `quantization` (None: one can)."""
    if overrides and quantization in overrides:
        return None
    try:
        weight_format(quantization)
    except UnreadablePrecisionError as err:
        return str(err)
    return None


def format_precision(fmt: str | None) -> Precision:
    """`fp16` -> Precision(16, True); `int4` -> Precision(4, False); None/unreadable -> 0 bits."""
    match = _DECLARED.match(fmt or "")
    if match is None:
        return UNKNOWN
    return Precision(int(match.group(2)), match.group(1) != "int")


def precision_of(quantization: str, overrides: Mapping[str, str] | None = None) -> Precision:
    """The precision a quantization declares; unknown names are least precise (0 bits)."""
    return format_precision(declared_format(quantization, overrides))


def quantization_bits(quantization: str) -> int:
    """Bits per weight a quantization name implies (32, 16, 8, 6, 5, 4, ...), or 0 when it
    declares none (the table build refuses such a name: `format_problem`).

    >>> [quantization_bits(q) for q in ("bf16", "fp8", "int8-w8a8", "awq-int4", "exotic")]
    [16, 8, 8, 4, 0]
    """
    return precision_of(quantization).bits


def precision_sort_key(
    pair: str, quantization: str, overrides: Mapping[str, str] | None = None
) -> tuple[int, int, str]:
    """Sort key that puts the most precise pair of a family first: bits descending, floating
    point before integer, then the pair name (a stable tie-break only)."""
    bits, floating = precision_of(quantization, overrides)
    return (-bits, -int(floating), pair)


def precision_ranks(
    pairs: Mapping[str, str], overrides: Mapping[str, str] | None = None
) -> dict[str, int]:
    """pair -> rank among `pairs` (pair -> quantization, one family): 0 = most precise; equal
    formats (bf16 and fp16) share a rank."""
    levels = sorted({precision_of(q, overrides) for q in pairs.values()}, reverse=True)
    rank_of = {level: rank for rank, level in enumerate(levels)}
    return {pair: rank_of[precision_of(q, overrides)] for pair, q in pairs.items()}
