"""A small factory for routing tables in unit tests (built through `stamp_table`)."""

from __future__ import annotations

from typing import Any

from contracts.routing_table import RoutingTable, stamp_table
from data_plane.decision.compile import compile_table
from data_plane.domain import CompiledTable

CATEGORIES = ("chat", "extraction", "code", "math", "reasoning")


def entry(
    family: str,
    quant: str,
    *,
    endpoints: int = 1,
    context_length: int = 8192,
    chars_per_token: float = 4.0,
    input_usd_per_mtok: float = 0.1,
    output_usd_per_mtok: float = 0.4,
    ttft_base_s: float = 0.05,
    ttft_per_input_token_s: float = 0.0001,
    ttft_per_load_s: float = 0.01,
    tpot_base_s: float = 0.01,
    tpot_per_load_s: float = 0.001,
    accuracy: float | dict[str, float] = 0.8,
    precision_rank: int = 0,
) -> dict[str, Any]:
    """One PairEntry as plain data; `accuracy` is one value for every category or a dict."""
    acc = accuracy if isinstance(accuracy, dict) else dict.fromkeys(CATEGORIES, accuracy)
    pair = f"{family}@{quant}"
    ref_cost = (512 * input_usd_per_mtok + 256 * output_usd_per_mtok) / 1e6
    return {
        "pair": pair,
        "family": family,
        "quantization": quant,
        "served_model_name": f"served-{family}-{quant}",
        "endpoints": [
            {"id": f"{pair}#{i}", "url": f"http://10.0.0.{i + 1}:8000/{family}-{quant}"}
            for i in range(endpoints)
        ],
        "context_length": context_length,
        "chars_per_token": chars_per_token,
        "input_usd_per_mtok": input_usd_per_mtok,
        "output_usd_per_mtok": output_usd_per_mtok,
        "price_source": "explicit",
        "sustained_output_tokens_per_s": 1000.0,
        "latency": {
            "quantile": 0.95,
            "ttft_base_s": ttft_base_s,
            "ttft_per_input_token_s": ttft_per_input_token_s,
            "ttft_per_load_s": ttft_per_load_s,
            "tpot_base_s": tpot_base_s,
            "tpot_per_load_s": tpot_per_load_s,
            "max_profiled_load": 64,
        },
        "accuracy": acc,
        "accuracy_n": dict.fromkeys(acc, 100),
        "utility": dict.fromkeys(acc, 1.0),
        "precision_rank": precision_rank,
        "reference_cost_usd": ref_cost,
    }


def table(
    entries: list[dict[str, Any]],
    *,
    policy: dict[str, Any] | None = None,
    baselines: dict[str, str] | None = None,
    version: int = 0,
) -> RoutingTable:
    """A stamped RoutingTable; entries are put in reference-cost order (then pair name)."""
    ordered = sorted(entries, key=lambda e: (e["reference_cost_usd"], e["pair"]))
    data: dict[str, Any] = {
        "version": version,
        "created_at": "2025-01-01T00:00:00Z",
        "policy": policy or {},
        "entries": ordered,
        "baselines": baselines or {},
        "categories": list(CATEGORIES),
    }
    return stamp_table(data)


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
