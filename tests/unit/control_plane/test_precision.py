"""Bits from quantization names and the precision order within a family."""

from __future__ import annotations

import pytest

from control_plane.precision import precision_sort_key, quantization_bits


@pytest.mark.parametrize(
    ("name", "bits"),
    [
        ("fp32", 32),
        ("float32", 32),
        ("bf16", 16),
        ("fp16", 16),
        ("FP16", 16),
        ("fp8", 8),
        ("fp8-dynamic", 8),
        ("int8-w8a8", 8),
        ("w8a16", 8),
        ("gptq-int8", 8),
        ("awq-int4", 4),
        ("gptq-int4", 4),
        ("awq", 4),
        ("w4a16", 4),
        ("nf4", 4),
        ("exotic", 0),
    ],
)
def test_quantization_bits(name: str, bits: int) -> None:
    assert quantization_bits(name) == bits


def test_accuracy_first_then_bits_then_name() -> None:
    keys = [
        precision_sort_key("f@awq-int4", "awq-int4", 0.80),
        precision_sort_key("f@fp8", "fp8", 0.80),
        precision_sort_key("f@int8", "int8", 0.80),
        precision_sort_key("f@fp16", "fp16", 0.79),
        precision_sort_key("f@bf16", "bf16", 0.81),
    ]
    ordered = [k[2] for k in sorted(keys)]
    # bf16 is the most accurate; fp8 and int8 tie on accuracy and bits, so the name decides;
    # fp16's lower measured accuracy outweighs its bits.
    assert ordered == ["f@bf16", "f@fp8", "f@int8", "f@awq-int4", "f@fp16"]
