"""The simulated fleet of the routing-quality section, its eval sets (answer keys) and policy.

One family at fp16 / fp8 / int8 / int4 (Llama 3.1 8B shapes) plus a larger family (70B at
int4 and fp8). Time runs about 10x faster than on GPUs, with outputs of tens of tokens, so
the section takes minutes; the relative speeds, capacities, prices and accuracies are what
matter. Accuracy per category is what the simulator answers correctly with; the router only
sees what the profiler measures from the eval sets below.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SMALL, LARGE = "llama-3.1-8b-instruct", "llama-3.1-70b-instruct"
CATEGORIES = ("chat", "extraction", "code", "math", "reasoning")


@dataclass(frozen=True, slots=True)
class SimPair:
    family: str
    quantization: str
    name: str  # served model name
    ttft_base_s: float
    ttft_per_input_token_s: float
    tpot_base_s: float
    tpot_per_running_s: float
    max_running: int
    output_usd_per_mtok: float
    hardware: str
    accuracy: tuple[float, float, float, float, float]  # in CATEGORIES order

    @property
    def pair(self) -> str:
        return f"{self.family}@{self.quantization}"


# fmt: off
# family, quantization, served name, TTFT base and per input token, TPOT base and per running
# request, batch size, output USD per Mtok, hardware, accuracy (chat, extraction, code, math,
# reasoning).
PAIRS = (
    SimPair(SMALL, "fp16", "meta-llama/Llama-3.1-8B-Instruct",
            0.008, 2e-5, 0.0030, 0.00010, 16, 0.20, "1x H100-SXM-80GB",
            (0.88, 0.92, 0.72, 0.76, 0.68)),
    SimPair(SMALL, "fp8", "neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8",
            0.006, 1.5e-5, 0.0022, 0.00008, 24, 0.15, "1x H100-SXM-80GB",
            (0.87, 0.91, 0.71, 0.75, 0.67)),
    SimPair(SMALL, "int8-w8a8", "neuralmagic/Meta-Llama-3.1-8B-Instruct-quantized.w8a8",
            0.006, 1.6e-5, 0.0024, 0.00008, 24, 0.13, "1x L40S-48GB",
            (0.86, 0.90, 0.70, 0.74, 0.66)),
    SimPair(SMALL, "awq-int4", "hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4",
            0.005, 1.8e-5, 0.0018, 0.00010, 32, 0.12, "1x L40S-48GB",
            (0.78, 0.82, 0.58, 0.62, 0.57)),
    SimPair(LARGE, "awq-int4", "hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4",
            0.015, 5e-5, 0.0045, 0.00020, 16, 0.60, "1x H100-SXM-80GB",
            (0.93, 0.95, 0.87, 0.89, 0.85)),
    SimPair(LARGE, "fp8", "neuralmagic/Meta-Llama-3.1-70B-Instruct-FP8",
            0.020, 6e-5, 0.0060, 0.00025, 16, 0.90, "2x H100-SXM-80GB",
            (0.95, 0.97, 0.90, 0.92, 0.88)),
)
# fmt: on
MOST_PRECISE = f"{LARGE}@fp8"
CHEAPEST = f"{SMALL}@awq-int4"

# Floors a request may ask for, per category; each sits >= 0.04 from every pair's accuracy.
FLOORS: dict[str, tuple[float, ...]] = {
    "chat": (0.70, 0.82),
    "extraction": (0.75, 0.86),
    "code": (0.50, 0.64, 0.80),
    "math": (0.55, 0.69, 0.84),
    "reasoning": (0.50, 0.62, 0.80),
}

POLICY: dict[str, Any] = {
    "latency_quantile": 0.95,
    "default_category": "chat",
    "budget_mode": "best-effort",
    "categories": {c: {"min_accuracy": 0.0, "typical_output_tokens": 48} for c in CATEGORIES},
    "baselines": {SMALL: f"{SMALL}@fp16", LARGE: f"{LARGE}@fp8"},
    "reference_input_tokens": 64,
    "reference_output_tokens": 48,
}


def sim_fleet(
    answer_keys: list[Path], seed: int, pairs: Sequence[SimPair] = PAIRS
) -> dict[str, Any]:
    """The simulator's fleet file (SimFleetConfig) as data (`pairs`: this section's fleet
    unless another scenario passes its own)."""
    return {
        "answer_keys": [str(p) for p in answer_keys],
        "pairs": [
            {
                "name": p.name,
                "family": p.family,
                "quantization": p.quantization,
                "ttft_base_s": p.ttft_base_s,
                "ttft_per_input_token_s": p.ttft_per_input_token_s,
                "tpot_base_s": p.tpot_base_s,
                "tpot_per_running_s": p.tpot_per_running_s,
                "max_running": p.max_running,
                "max_queue": 512,
                "context_length": 8192,
                "jitter_ratio": 0.1,
                "seed": seed + i,
                "accuracy": dict(zip(CATEGORIES, p.accuracy, strict=True)),
            }
            for i, p in enumerate(pairs)
        ],
    }


def profiler_fleet(
    urls: dict[str, str],
    evalsets: list[Path],
    out_dir: Path,
    quick: bool,
    pairs: Sequence[SimPair] = PAIRS,
) -> dict[str, Any]:
    """The profiler's fleet file: every simulated pair, explicit prices, a load sweep that
    reaches past each engine's batch size."""
    load = {
        "concurrency": [1, 8, 16] if quick else [1, 4, 8, 16, 24, 32],
        "input_tokens": [64, 256],
        "output_tokens": [32],
        "requests_per_level": 12 if quick else 40,
        "warmup": 2,
    }
    return {
        "out_dir": str(out_dir),
        "parallel": 2,
        "defaults": {
            "engine": "vllm",
            "engine_version": "simulator",
            "load": load,
            "evalsets": [str(p) for p in evalsets],
        },
        "pairs": [
            {
                "family": p.family,
                "quantization": p.quantization,
                "served_model_name": p.name,
                "endpoints": [urls[p.name]],
                "hardware": {"name": p.hardware},
                "prices": {
                    "input_usd_per_mtok": p.output_usd_per_mtok / 4,
                    "output_usd_per_mtok": p.output_usd_per_mtok,
                },
                "context_length": 8192,
            }
            for p in pairs
        ],
    }


# --- eval sets: items with known answers, by category -----------------------------------

_SEASONS = ("spring", "summer", "autumn", "winter")
_NAMES = ("Alice", "Bob", "Carol", "Dmitri", "Eve", "Farah", "Goran", "Hana", "Ivan", "Jun")
_KINDS = (
    ("robin", "bird"),
    ("salmon", "fish"),
    ("oak", "tree"),
    ("cobra", "snake"),
    ("tulip", "flower"),
    ("granite", "rock"),
    ("violin", "instrument"),
)


def _item(category: str, i: int, rng: random.Random) -> dict[str, Any]:
    """One eval line; prompts carry their category's usual surface features."""
    base = {"id": f"{category}-{i:04d}", "category": category, "max_tokens": 8}
    if category == "chat":
        s = rng.randrange(4)
        prompt = (
            f"Hey, quick one from ticket {i}: which season comes right after {_SEASONS[s]}? Thanks!"
        )
        return {**base, "prompt": prompt, "expected": _SEASONS[(s + 1) % 4], "scorer": "contains"}
    if category == "extraction":
        name, age = rng.choice(_NAMES), rng.randrange(18, 90)
        prompt = (
            f'Extract the fields as JSON {{"name": str, "age": int}} from this record '
            f"(#{i}): {name} is {age} years old."
        )
        return {
            **base,
            "prompt": prompt,
            "expected": {"name": name, "age": age},
            "scorer": "json",
            "max_tokens": 16,
        }
    if category == "code":
        k = rng.randrange(2, 50)
        prompt = (
            f"```python\ndef f_{i}(xs):\n    return sum(x * {k} for x in xs)\n```\n"
            f"What does f_{i}([1, 2]) return?"
        )
        return {**base, "prompt": prompt, "expected": 3 * k, "scorer": "numeric"}
    if category == "math":
        a, b, c = rng.randrange(2, 99), rng.randrange(2, 99), rng.randrange(1, 999)
        prompt = f"Compute {a} * {b} + {c} (problem {i})."
        return {**base, "prompt": prompt, "expected": a * b + c, "scorer": "numeric"}
    thing, kind = rng.choice(_KINDS)
    name = rng.choice(_NAMES)
    prompt = (
        f"Case {i}: if every {thing} is a {kind}, and {name}'s pet is a {thing}, "
        f"then what is {name}'s pet? Explain why."
    )
    return {**base, "prompt": prompt, "expected": kind, "scorer": "contains"}


def write_evalsets(folder: Path, per_category: int, seed: int) -> list[Path]:
    """One JSONL per category, deterministic for a seed; the same files are the simulator's
    answer keys and the profiler's eval sets."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for category in CATEGORIES:
        rng = random.Random(f"{seed}:{category}")
        path = folder / f"{category}.jsonl"
        lines = (json.dumps(_item(category, i, rng)) for i in range(per_category))
        path.write_text("\n".join(lines) + "\n")
        paths.append(path)
    return paths


def read_items(paths: list[Path]) -> dict[str, list[dict[str, Any]]]:
    by_category: dict[str, list[dict[str, Any]]] = {c: [] for c in CATEGORIES}
    for path in paths:
        for line in path.read_text().splitlines():
            item = json.loads(line)
            by_category[item["category"]].append(item)
    return by_category
