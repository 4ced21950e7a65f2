"""Section 7's canary rows (issue 36): at the default canary rate and budget, how soon a true
15-point drop is demoted, how often healthy pairs are, and what the items cost.

On a simulated clock: the control plane's window is 600 s and it looks every 30 s, so each
run stands for ten minutes to an hour of traffic; real time would make the section take
hours. What is simulated is only who answers right: each pair of the table built from the
example profiles (`examples/profiles`, 6 pairs, 5 categories, default policy) gets
`FeedbackSettings()`'s items per minute, each drawn as `CanarySender._pick` draws them (a
category the pair measured, then an item of the shipped set), right with the pair's true
accuracy in that category. Everything else is the code that runs: the counts go into
`LatencyFeedback` reports every feedback interval (10 s), and every loop interval (30 s) the
control plane's `merge_canaries` and `plan_canary_demotions` judge the reports of the last
`refit.window_s` at the policy's confidence and looks, as `FeedbackLoop` does.

- Drop: `DROPPED`'s math accuracy falls from its profile's 0.90 to 0.75 at time 0; seconds
  until its demotion (the table the loop publishes; data planes follow within their poll).
- Healthy: every pair answers as profiled for an hour while 40% of the clients' prompts are
  ones both pairs get wrong (and, for contrast, the same hours judged at one look's level,
  `canary_looks` 1: no target). Client prompts never enter the canary counts; their agreement
  re-asks (the policy's cap, 600 an hour, all on one pair) disagree at 40% at least, and each
  disagreement only owes the pair one more item: `EXTRA_PER_MINUTE` more items, all counted.
- Spend: each pair's worst case per hour at the default rate (`worst_cost_usd`, what the
  sender reserves: the prompt at the pair's characters per token plus every `max_tokens`),
  averaged over the draw, against `canary_usd_per_hour`.
"""

from __future__ import annotations

import random
import statistics
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from contracts.latency_feedback import CanaryCell, LatencyFeedback
from contracts.policy import AccuracyCheckPolicy, Policy
from contracts.profile_report import ProfileReport
from contracts.routing_table import RoutingTable
from control_plane.build.table import build_table
from control_plane.loop.canary_evidence import merge_canaries, plan_canary_demotions
from control_plane.settings import ControlPlaneSettings
from data_plane.checks.canary_items import (
    SHIPPED_ITEMS,
    capacity_spacing_s,
    load_items,
    worst_cost_usd,
)
from data_plane.decision.compile import compile_table
from data_plane.settings import FeedbackSettings

PROFILES = sorted((Path(__file__).parents[2] / "examples" / "profiles").glob("*.json"))
DROPPED, CATEGORY, DROP = "llama-3.1-70b-instruct@awq-int4", "math", 0.15
BOTH_WRONG = 0.4
EXTRA_PER_MINUTE = AccuracyCheckPolicy().max_checks_per_hour * BOTH_WRONG / 60.0
WITHIN_S = 600.0  # the target: a true 15-point drop demoted within 10 minutes
DROP_WATCH_S = 1800.0  # how long a drop run watches before calling it never
START = datetime(2026, 1, 1, tzinfo=UTC)
Truth = dict[str, dict[str, float]]  # pair -> category -> true accuracy


@dataclass(frozen=True, slots=True)
class CanaryRows:
    items_per_minute: float  # per pair, the default
    pair_per_minute: dict[str, float]  # per pair at one replica, within its capacity share
    usd_per_hour: float  # per pair, the default budget
    drop_runs: int
    drop_s: tuple[float, ...]  # seconds to demotion per run (inf: not within DROP_WATCH_S)
    drop_profile_bound: float  # what the dropped pair's math routes on
    healthy_hours: int  # simulated hours of the whole example fleet
    healthy_demotions: int  # demotions of pairs answering as profiled
    healthy_one_look: int  # the same hours judged at one look's level (canary_looks 1)
    cells: int  # (pair, category) cells watched in each healthy hour
    worst_usd_per_hour: dict[str, float]  # pair -> worst case per hour at the default rate
    max_item_usd: float  # the dearest item's worst case on the dearest pair

    @property
    def within(self) -> float:
        return sum(s <= WITHIN_S for s in self.drop_s) / len(self.drop_s)


def example_table(policy: Policy) -> RoutingTable:
    reports = [ProfileReport.model_validate_json(p.read_text()) for p in PROFILES]
    return build_table(reports, policy, START, prune=False)


def _truth(table: RoutingTable) -> Truth:
    return {e.pair: dict(e.accuracy) for e in table.entries}


class _Simulation:
    """One run: reports every feedback interval, the loop's judgement every loop interval."""

    def __init__(
        self, table: RoutingTable, truth: Truth, per_minute: dict[str, float], seed: int
    ) -> None:
        self.table, self.truth, self.policy = table, truth, table.policy
        self.items = load_items([SHIPPED_ITEMS])
        bucket_s = FeedbackSettings().interval_s
        self.per_bucket = {pair: rate * bucket_s / 60.0 for pair, rate in per_minute.items()}
        self.rng = random.Random(seed)
        self.reports: list[tuple[float, LatencyFeedback]] = []
        self.carry = dict.fromkeys(truth, 0.0)

    def _bucket(self, end_s: float) -> None:
        counts: Counter[tuple[str, str, bool]] = Counter()
        for pair, accuracy in self.truth.items():
            self.carry[pair] += self.per_bucket[pair]
            categories = sorted(c for c in accuracy if self.items.get(c))
            while self.carry[pair] >= 1.0:
                self.carry[pair] -= 1.0
                category = self.rng.choice(categories)
                counts[(pair, category, self.rng.random() < accuracy[category])] += 1
        cells = {(p, c) for p, c, _ in counts}
        canary = tuple(
            CanaryCell(pair=p, category=c, n=counts[(p, c, True)] + counts[(p, c, False)],
                       right=counts[(p, c, True)])
            for p, c in sorted(cells)
        )  # fmt: skip
        at = START + timedelta(seconds=end_s)
        report = LatencyFeedback(
            instance="sim", table_version=self.table.version, window_start=at, window_end=at,
            canary=canary,
        )  # fmt: skip
        self.reports.append((end_s, report))

    def _look(self, now_s: float) -> list[tuple[str, str]]:
        since = now_s - self.policy.refit.window_s
        window = [r for t, r in self.reports if since <= t <= now_s]
        checks = self.policy.accuracy_check
        canaries = merge_canaries(window, self.table, checks.confidence, checks.canary_looks)
        return [(c.pair, c.category) for c in plan_canary_demotions(canaries, checks).demote]

    def run(self, seconds: float, stop_at: tuple[str, str] | None) -> list[tuple[float, str, str]]:
        """(seconds, pair, category) of each demotion; a demoted cell is not judged again."""
        feedback_s = FeedbackSettings().interval_s
        loop_s = ControlPlaneSettings().refit_check_interval_s
        demoted: list[tuple[float, str, str]] = []
        next_look, t = loop_s, 0.0
        while t < seconds:
            t += feedback_s
            self._bucket(t)
            if t < next_look:
                continue
            next_look += loop_s
            for cell in self._look(t):
                if cell not in {(p, c) for _, p, c in demoted}:
                    demoted.append((t, *cell))
            if stop_at in {(p, c) for _, p, c in demoted}:
                break
        return demoted


def pair_rates(table: RoutingTable, feedback: FeedbackSettings) -> dict[str, float]:
    """Each pair's items a minute at one replica: the configured rate, or fewer where the
    items' share of the pair's capacity spaces them further (`capacity_spacing_s`, over the
    items the pair may get; the dollar budget does not bind for the example pairs, below)."""
    items = load_items([SHIPPED_ITEMS])
    rates = {}
    for pair in compile_table(table).pairs:
        mine = [i for c in sorted(pair.accuracy) for i in items.get(c, ())]
        share = feedback.canary_capacity_share
        spacing_s = statistics.fmean(capacity_spacing_s(pair, i, share, 1) for i in mine)
        rates[pair.pair] = min(feedback.canary_items_per_minute, 60.0 / max(spacing_s, 1e-9))
    return rates


def _spend(table: RoutingTable, per_minute: dict[str, float]) -> tuple[dict[str, float], float]:
    items = load_items([SHIPPED_ITEMS])
    compiled = compile_table(table)
    per_hour, dearest = {}, 0.0
    for pair in compiled.pairs:
        categories = [c for c in sorted(pair.accuracy) if items.get(c)]
        means = [statistics.fmean(worst_cost_usd(pair, i) for i in items[c]) for c in categories]
        per_hour[pair.pair] = statistics.fmean(means) * per_minute[pair.pair] * 60.0
        dearest = max(dearest, *(worst_cost_usd(pair, i) for c in categories for i in items[c]))
    return per_hour, dearest


def _drop_seconds(table: RoutingTable, per_minute: dict[str, float], seed: int) -> float:
    truth = {DROPPED: dict(_truth(table)[DROPPED])}
    truth[DROPPED][CATEGORY] -= DROP
    demoted = _Simulation(table, truth, per_minute, seed).run(DROP_WATCH_S, (DROPPED, CATEGORY))
    return next((t for t, p, c in demoted if (p, c) == (DROPPED, CATEGORY)), float("inf"))


def run_canary_rows(quick: bool) -> CanaryRows:
    feedback = FeedbackSettings()
    table = example_table(Policy())
    per_minute = pair_rates(table, feedback)
    # a disagreement owes an item only to a pair its rate, not its share or budget, spaces
    owed = {
        p: rate + (EXTRA_PER_MINUTE if rate >= feedback.canary_items_per_minute else 0.0)
        for p, rate in per_minute.items()
    }
    drop_runs, hours = (40, 2) if quick else (300, 20)
    drops = tuple(_drop_seconds(table, per_minute, seed) for seed in range(drop_runs))
    checks = table.policy.accuracy_check
    one_look = table.model_copy(
        update={"policy": table.policy.model_copy(
            update={"accuracy_check": checks.model_copy(update={"canary_looks": 1})})}
    )  # fmt: skip
    healthy = [0, 0]
    for hour in range(hours):
        for i, judged in enumerate((table, one_look)):
            sim = _Simulation(judged, _truth(table), owed, 10_000 + hour)
            healthy[i] += len(sim.run(3600.0, None))
    entry = table.entry(DROPPED)
    assert entry is not None
    per_hour, dearest = _spend(table, per_minute)
    return CanaryRows(
        feedback.canary_items_per_minute, per_minute, feedback.canary_usd_per_hour, drop_runs,
        drops,
        (entry.accuracy_bound or entry.accuracy)[CATEGORY], hours, healthy[0], healthy[1],
        sum(len(a) for a in _truth(table).values()), per_hour, dearest,
    )  # fmt: skip
