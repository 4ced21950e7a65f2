"""Canary items: held-out eval items with known answers, sent to each pair at a budgeted rate
and scored by the category's scorer (docs/accuracy.md "Canary items").

A background task (`CanarySender.run`) sends, per pair of the table in force, at most
`items_per_minute` items, each to a category the pair's profile measured and the item file
holds, through the attempt path client requests take (`AttemptRunner`: engine key, an
endpoint whose breaker is closed), greedy and within the item's `max_tokens`, never counted as
client traffic (no decision, no latency feedback) and as the router's own load
(`AttemptLimit.background`: in no endpoint's load, no stall rule, breaker or pace; given up
after its allowance, no blame), so it never changes when a hung engine's clients are released.
Each pair may spend at most `usd_per_hour`
on them (reserved at the item's worst case before sending, settled from `usage`), spread over
the hour: a pair whose items would spend it early gets them spaced out instead. The answer
is scored as the profiler scores it (`contracts.code_tests.score_answer`: by the item's
`tests` run against the answer in a sandboxed child interpreter where it carries them, off
the event loop, else by its text scorer, `contracts.answer_scoring.score`) and counted in the
feedback summaries (`FeedbackAggregator.observe_canary`), which the control plane's demotion
rule reads. The items are the configured file's, else the shipped held-out sets
(`SHIPPED_ITEMS`); `prompt` items go to /v1/completions, `messages` (chat) items to
/v1/chat/completions.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import orjson

from contracts.answer_scoring import Scorer
from contracts.code_tests import CodeTestRunner, Scoring, check_tests, score_answer
from contracts.task_stop import STOP_GRACE_S, stop_tasks, where
from data_plane.checks.accuracy_check import CheckerParts, HourlyLimits
from data_plane.checks.agreement import answer_text
from data_plane.decision.choose import order_endpoints, predict
from data_plane.domain import CompiledPair, CompiledTable
from data_plane.resilience.breaker import BreakerState
from data_plane.serving.attempt import Attempt, AttemptLimit, Served
from data_plane.serving.lifecycle import Request
from data_plane.serving.usage import Usage, cost_usd, find_usage
from data_plane.telemetry.metrics import Route

logger = logging.getLogger(__name__)
_MAX_ITEMS_PER_HOUR = 1_000_000  # the dollar budget and the rate limit, not a count
MAX_EXTRA = 10  # extra items a pair's disagreements may queue, at most, at any time
MAX_IN_FLIGHT = 4  # items of one pair awaiting their answers at once, at most


# The shipped items: the profiler's held-out sets (`profiler/evalsets/holdout/*.jsonl`, in
# name order), which no built-in eval item repeats; used when no item file is named.
SHIPPED_ITEMS = Path(__file__).with_name("canary_items.jsonl")
_ROLES = frozenset({"system", "user", "assistant"})


@dataclass(frozen=True, slots=True)
class CanaryItem:
    category: str
    prompt: str  # sent to /v1/completions, as the profiler sends prompt items ("" for chat)
    expected: Any
    scorer: Scorer
    max_tokens: int
    tolerance: float = 0.0
    # A chat item (free text): sent to /v1/chat/completions, as the profiler sends them.
    messages: tuple[tuple[str, str], ...] = ()
    # Code items: Python asserts run against the answer's code (`contracts.code_tests`).
    tests: str | None = None

    @property
    def scoring(self) -> Scoring:
        """What the answer is scored by: the tests where the item has them, else its scorer."""
        return Scoring(self.prompt, self.expected, self.scorer, self.tolerance, self.tests)

    @property
    def path(self) -> str:
        return "/v1/chat/completions" if self.messages else "/v1/completions"

    @property
    def chars(self) -> int:
        """The characters the engine is asked to read (the prompt or every message)."""
        return len(self.prompt) + sum(len(content) for _, content in self.messages)

    def body(self) -> dict[str, Any]:
        """The request body, greedy, without `model`."""
        asked: dict[str, Any] = (
            {"messages": [{"role": r, "content": c} for r, c in self.messages]}
            if self.messages
            else {"prompt": self.prompt}
        )
        return {**asked, "max_tokens": self.max_tokens, "temperature": 0.0}


def _messages(doc: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """A chat item's messages as (role, content); ValueError unless each is a known role
    with string content and one is the user's."""
    found = tuple((str(m["role"]), m["content"]) for m in doc["messages"])
    if not all(r in _ROLES and isinstance(c, str) for r, c in found):
        raise ValueError("`messages` need a role of system/user/assistant and string content")
    if not any(r == "user" for r, _ in found):
        raise ValueError("`messages` need a user message")
    return found


def _item(doc: dict[str, Any]) -> CanaryItem:
    messages = _messages(doc) if "prompt" not in doc else ()
    return CanaryItem(
        category=str(doc["category"]),
        prompt=str(doc["prompt"]) if "prompt" in doc else "",
        expected=doc["expected"],
        scorer=Scorer(doc["scorer"]),
        max_tokens=int(doc.get("max_tokens", 16)),
        tolerance=float(doc.get("tolerance", 0.0)),
        messages=messages,
        tests=check_tests(doc["tests"]) if "tests" in doc else None,
    )


def parse_items(lines: list[str]) -> dict[str, tuple[CanaryItem, ...]]:
    """Items per category from eval-set JSON lines (the profiler's format: `prompt` or
    `messages` (chat: free text, sent to /v1/chat/completions), `expected`, `scorer`,
    `category`, `max_tokens`, optional `tolerance`, optional `tests`: Python asserts that
    must compile). Raises ValueError naming the line."""
    found: dict[str, list[CanaryItem]] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            item = _item(json.loads(line))
        except (ValueError, KeyError, TypeError) as err:
            raise ValueError(f"canary item line {number}: {err}") from err
        found.setdefault(item.category, []).append(item)
    return {category: tuple(items) for category, items in found.items()}


def load_items(paths: list[Path]) -> dict[str, tuple[CanaryItem, ...]]:
    lines: list[str] = []
    for path in paths:
        lines.extend(path.read_text(encoding="utf-8").splitlines())
    return parse_items(lines)


def worst_cost_usd(pair: CompiledPair, item: CanaryItem) -> float:
    """What `item` may cost on `pair` at most (reserved before it is sent): its prompt at
    the pair's characters per token, and all of its `max_tokens`."""
    return cost_usd(pair, Usage(round(item.chars / pair.chars_per_token) + 1, item.max_tokens))


class _Sink:
    """Where a canary's answer goes: nobody waits for it (non-streamed, never written to)."""

    started = False

    async def send(self, status: int, headers: Mapping[str, str], body: bytes) -> None:
        return None

    async def start(self, status: int, headers: Mapping[str, str]) -> None:
        return None

    async def write(self, chunk: bytes) -> None:
        return None

    async def finish(self) -> None:
        return None


def capacity_spacing_s(pair: CompiledPair, item: CanaryItem, share: float, replicas: int) -> float:
    """Seconds between a pair's items for `item` to keep the items within `share` of the
    pair's profiled output tokens a second (its `sustained_output_tokens_per_s` x its
    endpoints), split among `replicas` (each sends its own): item's `max_tokens` x replicas /
    (share x capacity). 0 when the capacity is not known."""
    capacity = pair.sustained_output_tokens_per_s * len(pair.endpoints)
    if not math.isfinite(capacity) or capacity <= 0:
        return 0.0
    return item.max_tokens * max(1, replicas) / (share * capacity)


@dataclass(frozen=True, slots=True)
class CanaryConfig:
    items_per_minute: float  # per pair; 0 = off
    usd_per_hour: float  # per pair
    timeout_s: float = 30.0
    capacity_share: float = 0.02  # of the pair's profiled output tokens a second


class CanarySender:
    def __init__(
        self,
        parts: CheckerParts,
        items: dict[str, tuple[CanaryItem, ...]],
        config: CanaryConfig,
        code: CodeTestRunner | None = None,
    ) -> None:
        self._p = parts
        self._items = items
        self._config = config
        # Code items' tests run in child interpreters, a few at a time, awaited off the loop.
        self._code = code if code is not None else CodeTestRunner()
        self._next: dict[str, float] = {}  # pair -> when its next slot opens
        self._paced: set[str] = set()  # pairs whose budget, not the rate, spaces their items
        self._limits: dict[str, HourlyLimits] = {}
        self._ids = itertools.count(1)
        self._extra: dict[str, int] = {}  # pair -> items owed to its disagreements
        self._in_flight: dict[str, int] = {}  # pair -> its items awaiting answers (`run`)
        self._clients_wait: Callable[[str], bool] = lambda _pair: False
        self._replicas: Callable[[], int] = lambda: 1

    def run_code_with(self, runner: CodeTestRunner) -> None:
        """The sandboxed runner code items' tests run in (its limits, how many at once)."""
        self._code = runner

    def count_replicas(self, replicas: Callable[[], int]) -> None:
        """The replicas sending items, this one included (those sharing in-flight counts;
        0 or 1: this one alone): the capacity share is split among them."""
        self._replicas = replicas

    def yield_to(self, clients_wait: Callable[[str], bool]) -> None:
        """No item goes to a pair while `clients_wait` for it (the flow-control queue's
        `waits_for`): canary items are this replica's own load, never ahead of a client's
        request; a pair's slot stays open and its item goes once nobody waits."""
        self._clients_wait = clients_wait

    def raise_rate(self, pair: str) -> None:
        """An agreement re-ask of `pair` disagreed: send it one item more than its rate
        (at most `MAX_EXTRA` owed), within its dollar budget. Agreement only asks for more
        evidence; it never decides (docs/accuracy.md "Canary items")."""
        self._extra[pair] = min(MAX_EXTRA, self._extra.get(pair, 0) + 1)

    def _due(self, pair: str) -> bool:
        if self._config.items_per_minute <= 0:
            return False
        if self._extra.get(pair, 0) > 0 and pair not in self._paced:
            self._extra[pair] -= 1
            return True
        opens = self._next.get(pair)
        return opens is None or self._p.clock() >= opens

    def _take_slot(self, pair: CompiledPair, item: CanaryItem) -> None:
        """The pair's next slot: one rate interval on, or, where the item's worst case at
        that rate would spend the budget before the hour is out, as far on as spreads the
        budget over the hour (so a dear pair gets fewer items all hour, never a spent
        budget and no evidence for the rest of it; its disagreements then owe nothing), or
        as far on as keeps the items within their share of the pair's capacity
        (`capacity_spacing_s`), whichever is furthest."""
        config = self._config
        usd = config.usd_per_hour
        by_rate = 60.0 / config.items_per_minute
        by_budget = worst_cost_usd(pair, item) * 3600.0 / usd if usd > 0 else math.inf
        share, replicas = config.capacity_share, self._replicas()
        by_budget = max(by_budget, capacity_spacing_s(pair, item, share, replicas))
        self._next[pair.pair] = self._p.clock() + max(by_rate, by_budget)
        if by_budget > by_rate:
            self._paced.add(pair.pair)
        else:
            self._paced.discard(pair.pair)

    def _pick(self, pair: CompiledPair) -> CanaryItem | None:
        categories = sorted(c for c in pair.accuracy if self._items.get(c))
        if not categories:
            return None
        category = self._p.rng.choice(categories)
        return self._p.rng.choice(self._items[category])

    async def run(self, table: Callable[[], CompiledTable | None]) -> None:
        """Send due items to the pairs of the table in force, looking once per slot (at
        most once a second); each item on its own task, so a slow pair holds back neither
        the others nor its own next slots (at most `MAX_IN_FLIGHT` of its items at once)."""
        interval_s = min(1.0, 60.0 / max(self._config.items_per_minute, 1e-9))
        tasks: set[asyncio.Task[int]] = set()
        try:
            while True:
                await asyncio.sleep(interval_s)
                current = table()
                if current is None:
                    continue
                for pair, item in self._due_items(current, self._has_room):
                    self._in_flight[pair.pair] = self._in_flight.get(pair.pair, 0) + 1
                    task = asyncio.create_task(self._send_one(current.version, pair, item))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
        finally:  # re-cancelled until each ends, bounded: an HTTP read may swallow one
            for task in await stop_tasks(list(tasks)):
                logger.error(
                    "canary item did not stop within %.0f s: %s", STOP_GRACE_S, where(task)
                )

    def _has_room(self, pair: str) -> bool:
        return self._in_flight.get(pair, 0) < MAX_IN_FLIGHT and not self._clients_wait(pair)

    async def _send_one(self, version: int, pair: CompiledPair, item: CanaryItem) -> int:
        try:
            return await self._send(version, pair, item)
        except Exception:  # a canary must never end the sender
            logger.exception("canary item failed")
            return 0
        finally:
            self._in_flight[pair.pair] -= 1

    def _due_items(
        self, table: CompiledTable, room: Callable[[str], bool] = lambda _pair: True
    ) -> list[tuple[CompiledPair, CanaryItem]]:
        """An item for each pair whose slot is open (and that has `room`), its slot taken."""
        due = []
        for pair in table.pairs:
            if not room(pair.pair) or not self._due(pair.pair):
                continue
            item = self._pick(pair)
            if item is None:
                continue
            self._take_slot(pair, item)
            due.append((pair, item))
        return due

    async def send_due(self, table: CompiledTable) -> int:
        """Send one item to each pair whose slot is open, all at once; returns how many
        were scored."""
        due = self._due_items(table, self._has_room)
        sends = [self._send(table.version, pair, item) for pair, item in due]
        return sum(await asyncio.gather(*sends))

    async def _send(self, version: int, pair: CompiledPair, item: CanaryItem) -> int:
        chars = item.chars
        worst = worst_cost_usd(pair, item)
        limits = self._limits.setdefault(pair.pair, HourlyLimits(self._p.clock))
        if not limits.reserve(worst, _MAX_ITEMS_PER_HOUR, self._config.usd_per_hour):
            self._count(pair.pair, item.category, "over_budget")
            return 0
        spent = [0.0]
        answer = await self._ask(pair, item, chars, spent)
        limits.settle(worst, spent[0])
        self._p.metrics.canary_cost.labels(pair.pair).inc(spent[0])
        if answer is None:
            self._count(pair.pair, item.category, "error")
            return 0
        right = await score_answer(self._code, answer, item.scoring)
        self._p.feedback.observe_canary(version, pair.pair, item.category, right)
        self._count(pair.pair, item.category, "right" if right else "wrong")
        return 1

    def _limit(self, engine: AttemptLimit, pair: str) -> AttemptLimit:
        """The router's own load (`AttemptLimit.background`: no client's allowance, decision
        or hang verdict is priced with it), given up without blame after its allowance for
        each of the pair's items in flight, itself included (they may queue at the engine
        one behind another), or the timeout if sooner."""
        limit_s = self._config.timeout_s
        if engine.allowance_s is not None:
            queued = max(1, self._in_flight.get(pair, 0))
            limit_s = min(limit_s, engine.allowance_s * queued)
        return replace(engine, limit_s=limit_s, background=True)

    def _count(self, pair: str, category: str, outcome: str) -> None:
        self._p.metrics.canary_items.labels(pair, category, outcome).inc()

    async def _ask(
        self, pair: CompiledPair, item: CanaryItem, chars: int, spent: list[float]
    ) -> str | None:
        """One item on `pair` through the attempt path; its answer, None when none came."""
        p = self._p
        health = p.health.view()
        live = tuple(e for e in pair.endpoints if e.id not in health.open_endpoints)
        if not live:
            return None
        ordered = order_endpoints(live, health.load, p.rng)
        target = predict(pair, ordered, chars, item.max_tokens, health.load)
        # a closed breaker only: a canary item is never a half-open endpoint's probe
        closed = BreakerState.CLOSED
        endpoint = next((e for e in target.endpoints if p.health.state(e.id) is closed), None)
        if endpoint is None:
            return None
        body = item.body()
        request = Request(f"canary-{next(self._ids)}", Route.OTHER, p.clock())
        request.sends(
            item.path,
            _Sink(),
            lambda model: orjson.dumps({**body, "model": model}),
            lambda _cand, _n: {},
            max_tokens=item.max_tokens,
        )
        limit = self._limit(p.runner.engine_limit(request, target, endpoint), pair.pair)
        with p.health.tracker.background(endpoint.id):  # ours in a scraped queue, in no load
            result = await p.runner.run(request, Attempt(target, endpoint, 1, limit))
        if not isinstance(result, Served):
            return None
        usage = find_usage(result.body)
        if usage is not None:
            spent[0] += cost_usd(pair, usage)
        return answer_text(result.body)
