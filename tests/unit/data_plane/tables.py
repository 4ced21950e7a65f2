"""Routing tables for unit tests: the shared factory (`tests.support.routing_tables`) and a
realistic two-family fleet."""

from __future__ import annotations

from typing import Any

from data_plane.decision.compile import compile_table
from data_plane.domain import CompiledTable
from tests.support.routing_tables import CATEGORIES, entry, table

__all__ = ["CATEGORIES", "entry", "fleet", "table"]


def fleet(policy: dict[str, Any] | None = None) -> CompiledTable:
    """A realistic two-family fleet: llama in bf16/fp8/awq-int4, qwen in bf16/int8."""
    return compile_table(
        table(
            [
                entry(
                    "llama",
                    "bf16",
                    endpoints=2,
                    input_usd_per_mtok=0.3,
                    output_usd_per_mtok=1.2,
                    tpot_base_s=0.02,
                    accuracy=0.9,
                ),
                entry(
                    "llama",
                    "fp8",
                    endpoints=2,
                    input_usd_per_mtok=0.2,
                    output_usd_per_mtok=0.8,
                    tpot_base_s=0.012,
                    accuracy=0.86,
                    precision_rank=1,
                ),
                entry(
                    "llama",
                    "awq-int4",
                    endpoints=3,
                    input_usd_per_mtok=0.1,
                    output_usd_per_mtok=0.4,
                    tpot_base_s=0.008,
                    accuracy=0.78,
                    precision_rank=2,
                ),
                entry(
                    "qwen",
                    "bf16",
                    input_usd_per_mtok=0.35,
                    output_usd_per_mtok=1.4,
                    tpot_base_s=0.025,
                    accuracy={"chat": 0.92, "code": 0.95, "math": 0.93},
                    chars_per_token=3.5,
                    context_length=32768,
                ),
                entry(
                    "qwen",
                    "int8-w8a8",
                    input_usd_per_mtok=0.15,
                    output_usd_per_mtok=0.6,
                    tpot_base_s=0.015,
                    accuracy={"chat": 0.88, "code": 0.9, "math": 0.85},
                    chars_per_token=3.5,
                    context_length=32768,
                    precision_rank=1,
                ),
            ],
            policy=policy,
        )
    )
