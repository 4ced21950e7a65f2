"""Routing tables as plain data for tests, built through `stamp_table`: the one factory the
unit tests (`tests/unit/data_plane/tables.py`) and the component fakes build on."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from contracts.routing_table import RoutingTable, stamp_table

CATEGORIES = ("chat", "extraction", "code", "math", "reasoning")


def entry(
    family: str,
    quant: str,
    *,
    endpoints: int = 1,
    urls: Sequence[str] = (),
    served_model_name: str | None = None,
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
    log_spread: float = 0.0,
) -> dict[str, Any]:
    """One PairEntry as plain data; `accuracy` is one value for every category or a dict.
    Endpoints `family@quant#i` at `urls`, or at `endpoints` made-up addresses. `log_spread`
    is the spread of ln(TTFT) and ln(TPOT) (0: a table without it, predictions exact)."""
    acc = accuracy if isinstance(accuracy, dict) else dict.fromkeys(CATEGORIES, accuracy)
    pair = f"{family}@{quant}"
    urls = urls or [f"http://10.0.0.{i + 1}:8000/{family}-{quant}" for i in range(endpoints)]
    ref_cost = (512 * input_usd_per_mtok + 256 * output_usd_per_mtok) / 1e6
    return {
        "pair": pair,
        "family": family,
        "quantization": quant,
        "served_model_name": served_model_name or f"served-{family}-{quant}",
        "endpoints": [{"id": f"{pair}#{i}", "url": u} for i, u in enumerate(urls)],
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
            "ttft_log_spread": log_spread,
            "tpot_log_spread": log_spread,
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
    created_at: str = "2025-01-01T00:00:00Z",
    fleet_baseline: str | None = None,
) -> RoutingTable:
    """A stamped RoutingTable; entries are put in reference-cost order (then pair name)."""
    ordered = sorted(entries, key=lambda e: (e["reference_cost_usd"], e["pair"]))
    data: dict[str, Any] = {
        "version": version,
        "created_at": created_at,
        "policy": policy or {},
        "entries": ordered,
        "baselines": baselines or {},
        "categories": list(CATEGORIES),
    }
    if fleet_baseline is not None:
        data["fleet_baseline"] = fleet_baseline
    return stamp_table(data)
