"""Regenerate the sample ProfileReports in examples/ (synthetic, not measurements).

`python examples/make_examples.py` rewrites examples/profiles/*.json deterministically from the
curves below: TTFT rises with prompt length and load, TPOT with load, accuracy drops a little with
each quantization step. The numbers are plausible for vLLM on H100s, chosen to show the routing
trade-offs; profile your own fleet with `python -m profiler` before routing real traffic.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

OUT_DIR = Path(__file__).parent / "profiles"
CONCURRENCY = (1, 8, 32, 64)
INPUT_TOKENS = (512, 2048)
OUTPUT_TOKENS = 256
REQUESTS_PER_LEVEL = 200
CATEGORY_N = {"chat": 300, "extraction": 250, "code": 164, "math": 500, "reasoning": 400}
EVAL_SET_ID = "gearbox-evals-mini-v1"


@dataclass(frozen=True)
class PairSpec:
    family: str
    quantization: str
    served_model_name: str
    hardware: str
    gpus: int
    hourly_usd: float
    endpoints: int
    ttft: tuple[float, float, float]  # p50 seconds: base, per input token, per load
    tpot: tuple[float, float]  # p50 seconds: base, per load
    accuracy: dict[str, float]
    weights_gb: float


_8B, _70B = "llama-3.1-8b-instruct", "llama-3.1-70b-instruct"
SPECS = (
    PairSpec(_8B, "fp16", "meta-llama/Llama-3.1-8B-Instruct", "1x H100-SXM-80GB", 1, 2.99, 2,
             (0.018, 3.0e-5, 0.0045), (0.0068, 0.00012),
             {"chat": 0.84, "extraction": 0.91, "code": 0.62, "math": 0.76, "reasoning": 0.56},
             16.1),
    PairSpec(_8B, "fp8", "neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8", "1x H100-SXM-80GB", 1,
             2.99, 2, (0.016, 2.2e-5, 0.0036), (0.0052, 0.00009),
             {"chat": 0.84, "extraction": 0.90, "code": 0.61, "math": 0.75, "reasoning": 0.55},
             8.5),
    PairSpec(_8B, "int8-w8a8", "neuralmagic/Meta-Llama-3.1-8B-Instruct-quantized.w8a8",
             "1x H100-SXM-80GB", 1, 2.99, 1, (0.018, 2.5e-5, 0.0041), (0.0058, 0.00011),
             {"chat": 0.83, "extraction": 0.89, "code": 0.60, "math": 0.74, "reasoning": 0.54},
             8.5),
    PairSpec(_8B, "awq-int4", "hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4",
             "1x H100-SXM-80GB", 1, 2.99, 1, (0.020, 3.4e-5, 0.0050), (0.0044, 0.00016),
             {"chat": 0.82, "extraction": 0.88, "code": 0.57, "math": 0.70, "reasoning": 0.52},
             5.7),
    PairSpec(_70B, "fp8", "neuralmagic/Meta-Llama-3.1-70B-Instruct-FP8", "2x H100-SXM-80GB", 2,
             5.98, 1, (0.060, 1.1e-4, 0.012), (0.0210, 0.00030),
             {"chat": 0.91, "extraction": 0.95, "code": 0.79, "math": 0.92, "reasoning": 0.78},
             72.0),
    PairSpec(_70B, "awq-int4", "hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4",
             "2x H100-SXM-80GB", 2, 5.98, 1, (0.070, 1.3e-4, 0.014), (0.0165, 0.00036),
             {"chat": 0.90, "extraction": 0.94, "code": 0.77, "math": 0.90, "reasoning": 0.76},
             39.0),
)  # fmt: skip


def quantiles(p50: float, spread: float, rng: random.Random) -> dict[str, Any]:
    """A right-skewed latency distribution around `p50` (seconds)."""
    p = p50 * rng.uniform(0.98, 1.02)
    return {
        "n": REQUESTS_PER_LEVEL,
        "mean": round(p * (1 + 0.3 * spread), 6),
        "p50": round(p, 6),
        "p90": round(p * (1 + 1.0 * spread), 6),
        "p95": round(p * (1 + 1.4 * spread), 6),
        "p99": round(p * (1 + 2.2 * spread), 6),
    }


def latency_sample(spec: PairSpec, load: int, n_in: int, rng: random.Random) -> dict[str, Any]:
    ttft = quantiles(spec.ttft[0] + spec.ttft[1] * n_in + spec.ttft[2] * load, 0.25, rng)
    tpot = quantiles(spec.tpot[0] + spec.tpot[1] * load, 0.08, rng)
    e2e_p50 = ttft["p50"] + OUTPUT_TOKENS * tpot["p50"]
    e2e = quantiles(e2e_p50, 0.12, rng)
    rps = load / e2e["mean"]
    return {
        "concurrency": load,
        "input_tokens": n_in,
        "output_tokens": OUTPUT_TOKENS,
        "requests": REQUESTS_PER_LEVEL,
        "errors": 0,
        "duration_s": round(REQUESTS_PER_LEVEL / rps, 3),
        "ttft_s": ttft,
        "tpot_s": tpot,
        "e2e_s": e2e,
        "output_tokens_per_s": round(rps * OUTPUT_TOKENS, 2),
        "requests_per_s": round(rps, 4),
    }


def wilson(correct: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """95% Wilson score interval of correct/n."""
    p = correct / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def accuracy_rows(spec: PairSpec) -> list[dict[str, Any]]:
    rows = []
    for category, n in CATEGORY_N.items():
        correct = round(spec.accuracy[category] * n)
        low, high = wilson(correct, n)
        rows.append(
            {
                "category": category,
                "accuracy": round(correct / n, 4),
                "n": n,
                "ci_low": math.floor(low * 1e4) / 1e4,
                "ci_high": math.ceil(high * 1e4) / 1e4,
            }
        )
    return rows


def report(spec: PairSpec) -> dict[str, Any]:
    pair = f"{spec.family}@{spec.quantization}"
    rng = random.Random(zlib.crc32(pair.encode()))
    host = f"vllm-{spec.family.replace('.', '-')}-{spec.quantization}"
    return {
        "schema_version": "1.0",
        "kind": "ProfileReport",
        "family": spec.family,
        "quantization": spec.quantization,
        "served_model_name": spec.served_model_name,
        "endpoints": [
            f"http://{host}-{i}.gearbox.svc.cluster.local:8000" for i in range(spec.endpoints)
        ],
        "hardware": {
            "name": spec.hardware,
            "accelerator": "NVIDIA H100-SXM-80GB",
            "accelerator_count": spec.gpus,
            "hourly_usd": spec.hourly_usd,
        },
        "context_length": 32768,
        "chars_per_token": 4.1,
        "latency": [latency_sample(spec, c, n, rng) for c in CONCURRENCY for n in INPUT_TOKENS],
        "accuracy": accuracy_rows(spec),
        "memory": {"weights_bytes": int(spec.weights_gb * 1e9)},
        "provenance": {
            "engine": "vllm",
            "engine_version": "0.6.3",
            "eval_set_id": EVAL_SET_ID,
            "eval_set_sha256": hashlib.sha256(EVAL_SET_ID.encode()).hexdigest(),
            "profiler_version": "0.1.0",
            "host": "synthetic-example",
            "started_at": "2026-11-01T09:00:00Z",
            "finished_at": "2026-11-01T09:42:00Z",
            "partial": False,
        },
    }


def main() -> None:
    OUT_DIR.mkdir(exist_ok=True)
    for spec in SPECS:
        name = f"{spec.family}@{spec.quantization}.json"
        text = json.dumps(report(spec), indent=2) + "\n"
        (OUT_DIR / name).write_text(text, encoding="utf-8")
        print(OUT_DIR / name)


if __name__ == "__main__":
    main()
