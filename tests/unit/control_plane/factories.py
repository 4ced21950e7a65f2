"""Synthetic ProfileReports with exactly known latency curves, for control-plane tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from contracts.profile_report import ProfileReport

# Quantile q of a synthetic latency = its p50 * this factor, so a fit at q recovers p50 * factor.
QUANTILE_FACTOR = {"p50": 1.0, "p90": 1.1, "p95": 1.2, "p99": 1.5}
DEFAULT_ACCURACY = {"chat": 0.8, "extraction": 0.85, "code": 0.6, "math": 0.7, "reasoning": 0.5}


def _quantiles(p50: float) -> dict[str, Any]:
    return {"n": 100, "mean": p50, **{k: p50 * f for k, f in QUANTILE_FACTOR.items()}}


def sample(
    load: int,
    n_in: int,
    ttft: tuple[float, float, float],
    tpot: tuple[float, float],
    n_out: int = 256,
    errors: int = 0,
    throughput: float | None = None,
) -> dict[str, Any]:
    ttft_s = ttft[0] + ttft[1] * n_in + ttft[2] * load
    tpot_s = tpot[0] + tpot[1] * load
    e2e = ttft_s + n_out * tpot_s
    return {
        "concurrency": load,
        "input_tokens": n_in,
        "output_tokens": n_out,
        "requests": 100,
        "errors": errors,
        "duration_s": 10.0,
        "ttft_s": _quantiles(ttft_s),
        "tpot_s": _quantiles(tpot_s),
        "e2e_s": _quantiles(e2e),
        "output_tokens_per_s": throughput or load * n_out / e2e,
        "requests_per_s": load / e2e,
    }


def _accuracy(category: str, accuracy: float) -> dict[str, Any]:
    low, high = max(0.0, accuracy - 0.05), min(1.0, accuracy + 0.05)
    return {"category": category, "accuracy": accuracy, "n": 200, "ci_low": low, "ci_high": high}


def report_data(
    family: str = "fam",
    quantization: str = "fp16",
    *,
    ttft: tuple[float, float, float] = (0.02, 2e-5, 0.004),
    tpot: tuple[float, float] = (0.006, 0.0001),
    loads: Sequence[int] = (1, 4, 16),
    inputs: Sequence[int] = (256, 1024),
    accuracy: Mapping[str, float] | None = None,
    hourly_usd: float | None = 2.0,
    prices: tuple[float, float] | None = None,
    partial: bool = False,
    context_length: int = 8192,
) -> dict[str, Any]:
    """A valid report as plain JSON data (tests mutate it to make invalid ones)."""
    acc = DEFAULT_ACCURACY if accuracy is None else accuracy
    return {
        "family": family,
        "quantization": quantization,
        "served_model_name": f"org/{family}-{quantization}",
        "endpoints": [f"http://{family}-{quantization}.internal:8000"],
        "hardware": {"name": "1x H100", "hourly_usd": hourly_usd},
        "prices": (
            None
            if prices is None
            else {"input_usd_per_mtok": prices[0], "output_usd_per_mtok": prices[1]}
        ),
        "context_length": context_length,
        "latency": [sample(c, n, ttft, tpot) for c in loads for n in inputs],
        "accuracy": [_accuracy(c, a) for c, a in acc.items()],
        "provenance": {
            "engine": "vllm",
            "engine_version": "0.6.3",
            "eval_set_id": "evals-v1",
            "eval_set_sha256": "a" * 64,
            "profiler_version": "0.1.0",
            "started_at": "2026-11-01T09:00:00Z",
            "finished_at": "2026-11-01T09:30:00Z",
            "partial": partial,
        },
    }


def make_report(family: str = "fam", quantization: str = "fp16", **kw: Any) -> ProfileReport:
    return ProfileReport.model_validate(report_data(family, quantization, **kw))
