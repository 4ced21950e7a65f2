"""How much the real demo measures, sized to the speed its engines showed in the smoke step.

Pure. A size is a number of eval items per category for each pair's profile, the profiler's
requests per load level, and the replayed requests. The demo takes the largest size whose
estimate (`demo.estimate`: output tokens over the smoke speed) ends the demo within
`TARGET_S` of its start, else the smallest. Smaller sizes keep fewer eval items, so the
profiles' lower bounds sit further below the measured accuracy (`CP90_GAP`, the floors'
price; docs/engines.md, "The demo's size").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from demo.estimate import Estimate, estimate

TARGET_S = 600.0  # the whole demo, from its start (issue 35: about 10 minutes on 2-core AVX2)
PLANES_S = 20.0  # redis-server, both planes, two table publishes and the report (measured ~20 s)
# Accuracy 0.40 measured on n items: how far the one-sided 90% Clopper-Pearson lower bound
# (what a floor is compared with, docs/accuracy.md) sits below it. Measured with
# contracts.accuracy_bound.lower_bound(round(0.4 * n), n, 0.9); tests/e2e/test_demo_sizing.py.
CP90_GAP = {125: 0.059, 80: 0.074, 50: 0.094, 30: 0.123}


@dataclass(frozen=True, slots=True)
class DemoSize:
    """What one pair's profile and the replay measure. `items_per_category` None: every item."""

    name: str
    items_per_category: int | None
    requests_per_level: int
    replay_requests: int


# Largest first; `full` is every shipped item (124-126 a category). `small` keeps 30 items a
# category: above the profiler's 20-item minimum, so every category still gets a bound, at
# twice the full set's gap below the point estimate (CP90_GAP).
SIZES = (
    DemoSize("full", None, 8, 60),
    DemoSize("large", 80, 6, 60),
    DemoSize("medium", 50, 5, 50),
    DemoSize("small", 30, 4, 40),
)


@dataclass(frozen=True, slots=True)
class EvalLine:
    """One eval item as the demo selects it: its category, its `max_tokens`, its JSONL line."""

    category: str
    max_tokens: int
    text: str


@dataclass(frozen=True, slots=True)
class Sizing:
    size: DemoSize
    estimate: Estimate
    eval_items: int  # a pair's eval items at this size
    fits: bool  # whether the estimate ends within TARGET_S

    def line(self, pairs: int, target_s: float = TARGET_S) -> str:
        how = "fits" if self.fits else "the smallest size; it does not fit"
        return (
            f"  size {self.size.name} ({how} {target_s / 60:.0f} min): {self.eval_items} eval "
            f"items a pair, {self.size.requests_per_level} requests per load level, "
            f"{self.size.replay_requests} replayed requests\n" + self.estimate.line(pairs)
        )


def select_items(lines: Sequence[EvalLine], per_category: int | None) -> list[EvalLine]:
    """`per_category` items of each category, spread evenly over its items in file order (so
    hand-written and generated items both stay), categories in first-seen order."""
    groups: dict[str, list[EvalLine]] = {}
    for line in lines:
        groups.setdefault(line.category, []).append(line)
    kept: list[EvalLine] = []
    for group in groups.values():
        if per_category is None or per_category >= len(group):
            kept += group
            continue
        kept += [group[i * len(group) // per_category] for i in range(per_category)]
    return kept


def pick_size(
    smoke_tokens_per_s: Sequence[float],
    elapsed_s: float,
    work: Callable[[DemoSize], tuple[int, int, int]],
    parallel: int = 1,
    target_s: float = TARGET_S,
    replay_requests: int | None = None,
) -> Sizing | None:
    """The largest of SIZES whose estimate ends the demo within `target_s` of its start
    (`elapsed_s` spent so far), else the smallest; None when no engine was measured.
    `work(size)`: (eval items, eval output tokens, load-sweep output tokens) of one pair;
    `replay_requests` (the user's `--requests`) replaces each size's own."""
    chosen: Sizing | None = None
    for size in SIZES:
        items, eval_tokens, load_tokens = work(size)
        requests = replay_requests or size.replay_requests
        guess = estimate(smoke_tokens_per_s, eval_tokens, load_tokens, requests, parallel)
        if guess is None:
            return None
        fits = elapsed_s + guess.total_s + PLANES_S <= target_s
        chosen = Sizing(size, guess, items, fits)
        if fits:
            return chosen
    return chosen


def progress_line(done: int, total: int, elapsed_s: float) -> str:
    """After `done` of `total` pairs were profiled in `elapsed_s`: the rest at the same pace."""
    left = elapsed_s / done * (total - done) if done else 0.0
    return f"  {done}/{total} pairs profiled in {elapsed_s:.0f} s; about {left:.0f} s left"
