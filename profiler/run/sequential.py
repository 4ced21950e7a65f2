"""`--until-decided`: ask a category's eval items in batches until no floor is left undecided
for the pair, or the category's items run out (docs/profiler.md, docs/accuracy.md).

Looking at the counts and stopping when they look decided is optional stopping, which would
make a bound over-confident if each look used the full error budget. The plan looks at most
`MAX_LOOKS` times per category, each at `per_look(confidence, MAX_LOOKS)`, and the report
records `looks = MAX_LOOKS` so the table's bound splits its error the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from profiler.evals.accuracy import EvalItem, EvalResult
from profiler.evals.decisions import MAX_LOOKS, DecisionTarget, undecided_counts
from profiler.load.runner import Advance, CompletionClient, run_evals

MIN_BATCH = 10
# category -> (right, n) so far -> the categories in the order further items go
Order = Callable[[Mapping[str, tuple[int, int]]], list[str]]


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


def counts_by_category(results: Sequence[EvalResult]) -> dict[str, tuple[int, int]]:
    """category -> (right, n) of the results so far."""
    out: dict[str, tuple[int, int]] = {}
    for r in results:
        right, n = out.get(r.category, (0, 0))
        out[r.category] = (right + r.correct, n + 1)
    return out


def plan_batch(
    queues: Mapping[str, Sequence[EvalItem]],
    asked: dict[str, int],
    results: Sequence[EvalResult],
    target: DecisionTarget,
    budget: int | None,
    order: Order | None,
) -> list[EvalItem]:
    """The next look's items: per category (in `order`'s order when given) what `next_batch`
    asks, while `budget` (items left; None: no limit) lasts; `asked` is advanced in place."""
    categories = list(queues) if order is None else order(counts_by_category(results))
    categories += [c for c in queues if c not in categories]
    batch: list[EvalItem] = []
    for category in categories:
        queue = queues.get(category, ())
        more = next_batch(category, results, len(queue) - asked.get(category, 0), target)
        if budget is not None:
            more = min(more, budget - len(batch))
        batch += queue[asked[category] : asked[category] + more]
        asked[category] += more
    return batch


async def ask_until_decided(
    client: CompletionClient,
    items: Sequence[EvalItem],
    target: DecisionTarget,
    first_items: int,
    concurrency: int,
    results: list[EvalResult],
    advance: Advance,
    budget: int | None = None,
    order: Order | None = None,
) -> None:
    """The first `first_items` of every category, then up to MAX_LOOKS - 1 further batches
    per category while the pair is undecided there; results are appended to `results`.
    `budget` caps the items asked after the first ones, spent in `order` (`--item-budget`,
    `--traffic`: the categories whose deciding moves the most traffic first)."""
    planned = DecisionTarget(target.floors, target.confidence, target.min_items, MAX_LOOKS)
    queues = by_category(items)
    asked = {c: min(first_items, len(q)) for c, q in queues.items()}
    batch = [item for c, q in queues.items() for item in q[: asked[c]]]
    left = budget
    for look in range(1, MAX_LOOKS + 1):
        await run_evals(client, batch, concurrency, results, advance)
        if look == MAX_LOOKS:
            return
        batch = plan_batch(queues, asked, results, planned, left, order)
        if left is not None:
            left -= len(batch)
        if not batch:
            return
