"""`--until-decided`: ask a category's eval items in batches until no floor is left undecided
for the pair, or the category's items run out (docs/profiler.md, docs/accuracy.md).

Looking at the counts and stopping when they look decided is optional stopping, which would
make a bound over-confident if each look used the full error budget. The plan looks at most
`MAX_LOOKS` times per category, each at `per_look(confidence, MAX_LOOKS)`, and the report
records `looks = MAX_LOOKS` so the table's bound splits its error the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

from profiler.accuracy import EvalItem, EvalResult
from profiler.decisions import MAX_LOOKS, DecisionTarget, undecided_counts
from profiler.runner import Advance, CompletionClient, run_evals

MIN_BATCH = 10


def by_category(items: Sequence[EvalItem]) -> dict[str, list[EvalItem]]:
    """Items per category in file order."""
    out: dict[str, list[EvalItem]] = {}
    for item in items:
        out.setdefault(item.category, []).append(item)
    return out


def next_batch(
    category: str,
    results: Sequence[EvalResult],
    remaining: int,
    target: DecisionTarget,
) -> int:
    """How many more items of `category` to ask: 0 when decided or none are left, else the
    largest estimate of items needed (at least MIN_BATCH, at most what is left)."""
    mine = [r for r in results if r.category == category]
    right = sum(r.correct for r in mine)
    if remaining <= 0 or not mine:
        return 0
    rows = undecided_counts("-", category, right, len(mine), target)
    if not rows:
        return 0
    wanted = max(remaining if r.more is None else r.more for r in rows)
    return min(remaining, max(MIN_BATCH, wanted))


async def ask_until_decided(
    client: CompletionClient,
    items: Sequence[EvalItem],
    target: DecisionTarget,
    first_items: int,
    concurrency: int,
    results: list[EvalResult],
    advance: Advance,
) -> None:
    """The first `first_items` of every category, then up to MAX_LOOKS - 1 further batches
    per category while the pair is undecided there; results are appended to `results`."""
    planned = DecisionTarget(target.floors, target.confidence, target.min_items, MAX_LOOKS)
    queues = by_category(items)
    asked = {c: min(first_items, len(q)) for c, q in queues.items()}
    batch = [item for c, q in queues.items() for item in q[: asked[c]]]
    for look in range(1, MAX_LOOKS + 1):
        await run_evals(client, batch, concurrency, results, advance)
        if look == MAX_LOOKS:
            return
        batch = []
        for category, queue in queues.items():
            more = next_batch(category, results, len(queue) - asked[category], planned)
            batch += queue[asked[category] : asked[category] + more]
            asked[category] += more
        if not batch:
            return
