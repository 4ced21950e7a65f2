"""Table build time on large fleets: `control_plane.build.table.build` from synthetic ProfileReports
(pairs = families x fp16 / fp8 / int8-w8a8 / awq-int4) and an eval set of P prompts.

Every pair is evaluated on the same P items (P / 5 per category, with per-item outcomes, so the
bounds step runs its paired comparisons within each family); the P distinct prompt texts ride
on the reports, dealt out among them, and train the table's classifier. Reported: the whole
build (cold: a new prompt set, so the classifier's fit is not memoised), and its three heavy
steps timed on their own (latency fits, accuracy bounds, classifier training).
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from contracts.names import KNOWN_CATEGORIES
from contracts.policy import Policy
from contracts.profile_report import ProfileReport
from control_plane.build.category_training import classifier_for
from control_plane.build.fitting import fit_latency_model
from control_plane.build.floor_bounds import floor_bounds
from control_plane.build.table import build

QUANTS = (
    ("fp16", 1.0, 0.0),
    ("fp8", 1.35, 0.01),
    ("int8-w8a8", 1.25, 0.02),
    ("awq-int4", 1.7, 0.05),
)
_WORDS = {
    "chat": "hello thanks please tell story weekend advice friend feel recommend movie",
    "extraction": "extract fields invoice name date address table json list entities parse",
    "code": "function python bug compile class return loop array refactor test error",
    "math": "solve equation integral sum prove number probability derivative matrix root",
    "reasoning": "why because infer therefore puzzle logic deduce explain cause compare",
}
_COMMON = ["the", "a", "of", "to", "and", "in", "is", "it", "for", "on", "with", "as", "that"]


@dataclass(frozen=True, slots=True)
class BuildResult:
    pairs: int
    prompts: int
    total_s: float  # the whole build, cold (wall)
    total_cpu_s: float  # ...its CPU time, all threads (BLAS may use several)
    fits_s: float
    bounds_s: float
    classifier_s: float
    entries: int  # pairs left in the table after pruning
    blas_threads: str  # OPENBLAS_NUM_THREADS as the run had it (unset: OpenBLAS uses every core)


def _prompts(n: int, seed: int) -> list[dict[str, str]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        category = KNOWN_CATEGORIES[i % len(KNOWN_CATEGORIES)]
        words = _WORDS[category].split()
        text = [
            rng.choice(words if rng.random() < 0.35 else _COMMON)
            for _ in range(rng.randint(12, 60))
        ]
        out.append({"text": f"{' '.join(text)} #{seed}-{i}", "category": category})
    return out


def _sample(load: int, n_in: int, scale: float, speed: float) -> dict[str, Any]:
    ttft = 0.02 * scale + 3e-5 * scale / speed * n_in + 0.004 * scale * load
    tpot = 0.0068 * scale / speed * (1 + load / 60)
    e2e = ttft + 256 * tpot

    def q(p50: float) -> dict[str, float]:
        return {
            "n": 100,
            "mean": p50,
            "p50": p50,
            "p90": p50 * 1.1,
            "p95": p50 * 1.2,
            "p99": p50 * 1.5,
        }

    return {
        "concurrency": load,
        "input_tokens": n_in,
        "output_tokens": 256,
        "requests": 100,
        "errors": 0,
        "duration_s": 10.0,
        "ttft_s": q(ttft),
        "tpot_s": q(tpot),
        "e2e_s": q(e2e),
        "output_tokens_per_s": load * 256 / e2e,
        "requests_per_s": load / e2e,
    }


def _accuracy(category: str, items: int, accuracy: float, rng: random.Random) -> dict[str, Any]:
    outcomes = "".join("1" if rng.random() < accuracy else "0" for _ in range(items))
    right = outcomes.count("1")
    share = right / items
    return {
        "category": category,
        "accuracy": share,
        "n": items,
        "right": right,
        "ci_low": max(0.0, share - 0.05),
        "ci_high": min(1.0, share + 0.05),
        "items": [f"{category}-{k}" for k in range(items)],
        "outcomes": outcomes,
    }


def reports(n_pairs: int, n_prompts: int, seed: int) -> list[ProfileReport]:
    """`n_pairs` reports sharing one eval set of `n_prompts` items."""
    rng, prompts = random.Random(seed), _prompts(n_prompts, seed)
    per_category = max(1, n_prompts // len(KNOWN_CATEGORIES))
    out = []
    for i in range(n_pairs):
        family, (quant, speed, drop) = f"fam-{i // len(QUANTS):03d}", QUANTS[i % len(QUANTS)]
        size = (1, 3, 8, 14, 32, 70, 120, 405)[(i // len(QUANTS)) % 8]
        scale = (size / 8) ** 0.6
        base = 0.55 + min(0.3, 0.04 * size**0.5) - drop
        data = {
            "family": family,
            "quantization": quant,
            "served_model_name": f"org/{family}-{quant}",
            "endpoints": [f"http://{family}-{quant}.internal:8000"],
            "hardware": {"name": "1x H100", "hourly_usd": 2.0 * scale},
            "context_length": 32768,
            "latency": [
                _sample(c, n, scale, speed) for c in (1, 4, 16, 64) for n in (256, 1024, 4096)
            ],
            "accuracy": [_accuracy(c, per_category, base, rng) for c in KNOWN_CATEGORIES],
            "eval_prompts": prompts[i::n_pairs],
            "provenance": {
                "engine": "vllm",
                "engine_version": "0.6.3",
                "eval_set_id": "bench",
                "eval_set_sha256": "a" * 64,
                "profiler_version": "0.1.0",
                "started_at": "2026-11-01T09:00:00Z",
                "finished_at": "2026-11-01T09:30:00Z",
            },
        }
        out.append(ProfileReport.model_validate(data))
    return out


def time_build(n_pairs: int, n_prompts: int, seed: int = 1) -> BuildResult:
    policy = Policy()
    made = reports(n_pairs, n_prompts, seed)
    started, cpu = time.perf_counter(), time.process_time()
    table = build(made, policy, datetime(2026, 11, 1, tzinfo=UTC)).table
    total, total_cpu = time.perf_counter() - started, time.process_time() - cpu
    started = time.perf_counter()
    for report in made:
        fit_latency_model(report.latency, policy.latency_quantile)
    fits = time.perf_counter() - started
    started = time.perf_counter()
    floor_bounds(made, policy)
    bounds = time.perf_counter() - started
    fresh = reports(n_pairs, n_prompts, seed + 1)  # other texts: the fit is not memoised
    started = time.perf_counter()
    classifier_for(fresh, sorted(policy.categories))
    classifier = time.perf_counter() - started
    return BuildResult(
        n_pairs,
        n_prompts,
        total,
        total_cpu,
        fits,
        bounds,
        classifier,
        len(table.entries),
        os.environ.get("OPENBLAS_NUM_THREADS", f"unset ({os.cpu_count()} cores)"),
    )
