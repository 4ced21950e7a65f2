"""Synthetic but realistic routing tables for the overhead and decision-speed benchmarks.

Families of several sizes, each at fp16 / fp8 / int8-w8a8 / awq-int4, with prices, latency
coefficients and accuracy per category shaped like the example fleet (bigger = slower, dearer
and more accurate; lower precision = faster, cheaper, a little less accurate). Deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from contracts.names import KNOWN_CATEGORIES, pair_name
from contracts.policy import Policy
from contracts.routing_table import RoutingTable, stamp_table


@dataclass(frozen=True, slots=True)
class QuantSpec:
    name: str
    rank: int  # 0 = most precise
    speed: float  # decode speed relative to fp16
    accuracy_drop: float  # absolute accuracy lost vs fp16


QUANTS = (
    QuantSpec("fp16", 0, 1.0, 0.0),
    QuantSpec("fp8", 1, 1.35, 0.01),
    QuantSpec("int8-w8a8", 2, 1.25, 0.02),
    QuantSpec("awq-int4", 3, 1.7, 0.06),
)
_BASE_ACCURACY = {"chat": 0.80, "extraction": 0.86, "code": 0.58, "math": 0.62, "reasoning": 0.55}
_SIZES_B = (1, 3, 8, 14, 32, 70, 120, 405)

BENCH_POLICY: dict[str, Any] = {
    "latency_quantile": 0.95,
    "default_category": "chat",
    "categories": {
        "chat": {"min_accuracy": 0.70, "latency_budget_s": 8.0, "typical_output_tokens": 256},
        "extraction": {"min_accuracy": 0.80, "latency_budget_s": 6.0},
        "code": {"min_accuracy": 0.55, "latency_budget_s": 20.0, "typical_output_tokens": 512},
        "math": {"min_accuracy": 0.60, "latency_budget_s": 15.0},
        "reasoning": {"min_accuracy": 0.50, "latency_budget_s": 30.0},
    },
}


def _family(i: int) -> tuple[str, float]:
    size = _SIZES_B[i % len(_SIZES_B)]
    return f"bench-{i:03d}-{size}b", float(size)


def _entry(family: str, size_b: float, q: QuantSpec, urls: Sequence[str]) -> dict[str, Any]:
    scale = (size_b / 8.0) ** 0.6
    tpot = 0.0068 * scale / q.speed
    usd_per_mtok = 0.05 + 0.02 * size_b / q.speed
    bonus = min(0.3, 0.04 * (size_b**0.5))
    accuracy = {
        c: round(min(0.99, a + bonus - q.accuracy_drop), 4) for c, a in _BASE_ACCURACY.items()
    }
    pair = pair_name(family, q.name)
    return {
        "pair": pair,
        "family": family,
        "quantization": q.name,
        "served_model_name": f"org/{family}-{q.name}",
        "endpoints": [{"id": f"{pair}#{j}", "url": url} for j, url in enumerate(urls)],
        "context_length": 32768,
        "chars_per_token": 3.8 + 0.1 * (size_b % 3),
        "input_usd_per_mtok": round(usd_per_mtok / 4, 6),
        "output_usd_per_mtok": round(usd_per_mtok, 6),
        "price_source": "derived",
        "sustained_output_tokens_per_s": round(2000 / tpot / 100, 3),
        "latency": {
            "quantile": 0.95,
            "ttft_base_s": 0.02 * scale,
            "ttft_per_input_token_s": 3e-5 * scale / q.speed,
            "ttft_per_load_s": 0.004 * scale,
            "tpot_base_s": tpot,
            "tpot_per_load_s": tpot / 60,
            "max_profiled_load": 64,
        },
        "accuracy": accuracy,
        "accuracy_n": {c: 300 for c in accuracy},
        "utility": {c: round(a - 0.01 * usd_per_mtok, 4) for c, a in accuracy.items()},
        "precision_rank": q.rank,
        "reference_cost_usd": (512 * usd_per_mtok / 4 + 256 * usd_per_mtok) / 1e6,
    }


def synthetic_table(n_pairs: int, endpoint_urls: Sequence[Sequence[str]]) -> RoutingTable:
    """A table of `n_pairs` pairs (families x 4 quantizations, trimmed); pair i is served by
    `endpoint_urls[i % len(endpoint_urls)]`."""
    if n_pairs < 1 or not endpoint_urls:
        raise ValueError("need at least one pair and one endpoint list")
    entries: list[dict[str, Any]] = []
    for i in range((n_pairs + len(QUANTS) - 1) // len(QUANTS)):
        family, size_b = _family(i)
        for q in QUANTS:
            if len(entries) < n_pairs:
                urls = endpoint_urls[len(entries) % len(endpoint_urls)]
                entries.append(_entry(family, size_b, q, urls))
    entries.sort(key=lambda e: (e["reference_cost_usd"], e["pair"]))
    baselines: dict[str, str] = {}
    for e in sorted(entries, key=lambda e: e["precision_rank"]):
        baselines.setdefault(e["family"], e["pair"])
    policy = Policy.model_validate({**BENCH_POLICY, "baselines": baselines})
    return stamp_table(
        {
            "version": 1,
            "created_at": datetime(2026, 1, 1, tzinfo=UTC),
            "policy": policy.model_dump(mode="json"),
            "entries": entries,
            "baselines": baselines,
            "categories": list(KNOWN_CATEGORIES),
        }
    )
