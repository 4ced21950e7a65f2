"""Report building blocks for the profiler's tests (no network, no clock)."""

from __future__ import annotations

from datetime import UTC, datetime

from contracts.profile_report import (
    CategoryAccuracy,
    EngineFacts,
    Hardware,
    LatencySample,
    Memory,
    Prices,
)
from profiler.reports.report import Measured, RunFacts
from profiler.stats import summarize

STARTED = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
FINISHED = datetime(2026, 11, 22, 12, 5, tzinfo=UTC)


def run_facts(quantization: str = "fp8", prices: Prices | None = None) -> RunFacts:
    return RunFacts(
        family="llama-3.1-8b",
        quantization=quantization,
        served_model_name=f"llama-{quantization}",
        endpoints=("http://127.0.0.1:8001",),
        hardware=Hardware(name="1x L4", hourly_usd=None if prices else 0.8),
        prices=prices,
        context_length=8192,
        engine="vllm",
        engine_version="0.32.0",
        eval_set_id="chat+math",
        eval_set_sha256="a" * 64,
        started_at=STARTED,
        git_sha="b" * 40,
        host="bench-1",
    )


def latency_sample(concurrency: int, ttft: float, tpot: float, tok_s: float) -> LatencySample:
    e2e = ttft + 63 * tpot
    return LatencySample(
        concurrency=concurrency,
        input_tokens=128,
        output_tokens=64,
        requests=20,
        errors=1,
        duration_s=10.0,
        ttft_s=summarize([ttft, ttft * 1.2]),
        tpot_s=summarize([tpot, tpot * 1.1]),
        e2e_s=summarize([e2e, e2e * 1.1]),
        output_tokens_per_s=tok_s,
        requests_per_s=2.0,
    )


def accuracy(category: str, value: float, n: int = 20) -> CategoryAccuracy:
    return CategoryAccuracy(
        category=category,
        accuracy=value,
        n=n,
        ci_low=max(0, value - 0.2),
        ci_high=min(1, value + 0.1),
    )


def measured(latency: bool = True, evals: bool = True) -> Measured:
    return Measured(
        latency=(latency_sample(1, 0.05, 0.01, 100.0), latency_sample(4, 0.08, 0.015, 250.0))
        if latency
        else (),
        accuracy=(accuracy("chat", 0.9), accuracy("math", 0.6)) if evals else (),
        chars_per_token=3.9,
        engine_facts=EngineFacts(preemptions_total=0, max_requests_running=4),
        memory=Memory(kv_cache_usage_ratio_max=0.4),
    )
