"""The near-floor scenario's prompts: what the profiler asks, and what the trace sends.

The profiler asks the shipped generated eval sets (profiler/evalsets/*-generated.jsonl, 100
items per category); the trace draws from the held-out set (profiler/evalsets/holdout) and
the hand-written sets (profiler/evalsets/<category>.jsonl), less any prompt an eval set the
profiler asks also holds. For `--until-decided`, a larger eval file per category
follows the shipped one: more items from the same generator's makers (another seed), none
with a prompt of the built-in or held-out sets.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from bench.quality import fleet as qf
from profiler.evals.evalset_generator import MAKERS

EVALSETS = Path(__file__).resolve().parents[2] / "profiler" / "evalsets"
MAX_TRIES = 100_000  # the chat maker has about 1,077 distinct prompts in all


def eval_files() -> list[Path]:
    return sorted(EVALSETS.glob("*-generated.jsonl"))


def holdout_files() -> list[Path]:
    return sorted((EVALSETS / "holdout").glob("*.jsonl"))


def hand_written_files() -> list[Path]:
    """The hand-written built-in eval sets: prompts in another style than the generator's,
    which this scenario's profiler never asks (so the classifier never trains on them)."""
    return sorted(p for p in EVALSETS.glob("*.jsonl") if not p.name.endswith("-generated.jsonl"))


def _prompts(paths: list[Path]) -> set[str]:
    return {json.loads(line)["prompt"] for p in paths for line in p.read_text().splitlines()}


def trace_items(holdout: list[Path], evals: list[Path]) -> dict[str, list[dict[str, Any]]]:
    """Held-out items by category, less any whose prompt is also an eval prompt."""
    seen = _prompts(evals)
    items = qf.read_items(holdout)
    return {c: [i for i in items[c] if i["prompt"] not in seen] for c in items}


def _more(category: str, count: int, taken: set[str], seed: int) -> list[dict[str, Any]]:
    rng = random.Random(f"{seed}:{category}")
    items: list[dict[str, Any]] = []
    for _ in range(MAX_TRIES):
        if len(items) >= count:
            break
        raw = MAKERS[category](rng)
        if raw["prompt"] in taken:
            continue
        taken.add(raw["prompt"])
        items.append(
            {
                "id": f"{category}-x{len(items):04d}",
                "prompt": raw["prompt"],
                "expected": raw["expected"],
                "scorer": raw.get("scorer", "contains"),
                "category": category,
                "max_tokens": 8,
                "answer": raw.get("answer", f" {raw['expected']}"),
            }
        )
    return items


def larger_evalsets(folder: Path, extra: int, seed: int) -> list[Path]:
    """Per category, the shipped generated file then a file of up to `extra` more items (in
    that order: `--until-decided` asks a category's items in file order)."""
    folder.mkdir(parents=True, exist_ok=True)
    taken = _prompts([*EVALSETS.glob("*.jsonl"), *holdout_files()])
    paths = []
    for shipped in eval_files():
        category = shipped.name.removesuffix("-generated.jsonl")
        more = folder / f"{category}-more.jsonl"
        more.write_text("".join(json.dumps(i) + "\n" for i in _more(category, extra, taken, seed)))
        paths += [shipped, more]
    return paths
