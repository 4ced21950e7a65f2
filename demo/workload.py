"""A mixed workload, replayed through the data plane with the official `openai` client.

Requests come from the shipped eval sets (known answers, graded with the profiler's scorers)
plus a few open prompts. Each carries one of four budget classes whose floors and budgets are
derived from the table published in this run, so the demo shows routing on measured figures.
Floors are compared with the table's lower bounds (docs/accuracy.md), so they are set from the
bounds, as a team would set them once it has seen what its pairs prove (`team_floors`): the
policy's per-category floor is what the middle of the fleet proves, and `balanced` and `tight`
requests send no floor, so the policy's applies; `quality` asks for the best any pair proves,
`cheap` for none (`X-Min-Accuracy: 0`); `tight` has a latency budget 1.5x the fastest pair's
prediction at load 1.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from math import ceil, floor
from pathlib import Path
from statistics import median
from typing import Any

from contracts.routing_table import LatencyModel
from profiler.evals.accuracy import EvalItem, parse_eval_set

BUDGET_CLASSES = ("quality", "balanced", "cheap", "tight")
OPEN_PROMPTS = (
    "Once upon a time, in a small village by the sea,",
    "The three most important things about a good breakfast are",
    "Here is a short description of a modern city:",
    "The history of the bicycle begins",
)
OPEN_SHARE = 5  # one request in OPEN_SHARE has no known answer
TIGHT_FACTOR = 1.5  # tight budget = 1.5 x the fastest pair's predicted latency at load 1


@dataclass(frozen=True, slots=True)
class Job:
    """One request to send: what, how (streaming or not), and its budget headers."""

    index: int
    prompt: str
    category: str
    max_tokens: int
    budget_class: str
    stream: bool
    headers: tuple[tuple[str, str], ...]
    latency_budget_s: float
    item: EvalItem | None  # None: an open prompt without a known answer


def load_items(evalsets: Sequence[Path]) -> list[EvalItem]:
    items: list[EvalItem] = []
    for path in evalsets:
        items += [i for i in parse_eval_set(path.read_text(), path.name) if i.prompt]
    return items


def predicted_latency_s(entry: dict[str, Any], prompt: str, max_tokens: int) -> float:
    """The table's latency model at load 1 for this prompt (tokens estimated as the router
    does): the contract's own `LatencyModel`, so the demo's budgets follow the model routing
    uses (per-level prompt cost included), not a second copy of it."""
    model = LatencyModel.model_validate(entry["latency"])
    n_in = ceil(len(prompt) / entry["chars_per_token"])
    return model.latency_s(n_in, max_tokens, 1.0)


def proven(entry: dict[str, Any], category: str) -> float:
    """What a floor is compared with for this pair: its lower bound (the point estimate in a
    table built without bounds; 0 for a category it was not measured on)."""
    bounds = entry.get("accuracy_bound") or entry["accuracy"]
    return float(bounds.get(category, 0.0))


def team_floors(table: dict[str, Any]) -> dict[str, float]:
    """The policy's floor per category, as a team would set it after profiling: what the
    middle of its fleet proves (the median of the pairs' lower bounds, rounded down to two
    decimals), so at least half the pairs meet it."""
    return {
        category: floor(median(proven(e, category) for e in table["entries"]) * 100) / 100
        for category in table["categories"]
    }


def accuracy_floors(table: dict[str, Any], category: str) -> dict[str, float | None]:
    """X-Min-Accuracy per budget class for a category (None: none sent, the policy's floor
    applies): `quality` the best lower bound any pair proves (3 decimals, rounded down),
    `cheap` 0."""
    best = max(proven(e, category) for e in table["entries"])
    return {"quality": floor(best * 1000) / 1000, "balanced": None, "cheap": 0.0, "tight": None}


def _budget(
    table: dict[str, Any], prompt: str, max_tokens: int, budget_class: str, loose_s: float
) -> float:
    if budget_class != "tight":
        return loose_s
    fastest = min(predicted_latency_s(e, prompt, max_tokens) for e in table["entries"])
    return round(fastest * TIGHT_FACTOR, 3)


def make_job(
    index: int, item: EvalItem | None, prompt: str, table: dict[str, Any], loose_s: float
) -> Job:
    budget_class = BUDGET_CLASSES[index % len(BUDGET_CLASSES)]
    category = item.category if item else "chat"
    max_tokens = item.max_tokens if item else 24
    budget_s = _budget(table, prompt, max_tokens, budget_class, loose_s)
    headers = [("X-Task-Category", category), ("X-Latency-Budget-Ms", f"{budget_s * 1000:.0f}")]
    floor_value = accuracy_floors(table, category)[budget_class]
    if floor_value is not None:
        headers.append(("X-Min-Accuracy", f"{floor_value:.3f}"))
    return Job(
        index=index,
        prompt=prompt,
        category=category,
        max_tokens=max_tokens,
        budget_class=budget_class,
        stream=index % 2 == 1,
        headers=tuple(headers),
        latency_budget_s=budget_s,
        item=item,
    )


def build_jobs(
    items: Sequence[EvalItem], table: dict[str, Any], count: int, loose_s: float, seed: int
) -> list[Job]:
    """`count` jobs, seeded: eval items in a shuffled cycle, every OPEN_SHARE-th an open prompt."""
    rng = random.Random(seed)
    pool = list(items)
    rng.shuffle(pool)
    jobs = []
    for index in range(count):
        if index % OPEN_SHARE == OPEN_SHARE - 1:
            prompt = OPEN_PROMPTS[index // OPEN_SHARE % len(OPEN_PROMPTS)]
            jobs.append(make_job(index, None, prompt, table, loose_s))
        else:
            item = pool[index % len(pool)]
            assert item.prompt is not None
            jobs.append(make_job(index, item, item.prompt, table, loose_s))
    return jobs
