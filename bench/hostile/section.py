"""Section 7: a hostile tenant beside normal clients (issue 22): what one client's legal but odd
requests (`bench.hostile.traffic`) do to the breakers, the latency refits, the accuracy
demotions and everyone else's budgets; and that a truly hung engine is still caught.

In one process and event loop: a private redis-server, two simulated engines of one family
(`int4`, cheap, 0.90 right on the math key; `fp16`, the reference, four times the price, 0.97),
profiled as they run (prefill included, so image and tool prompts are as predicted when judged
on the engine's own token count) but for one kind of request: a prompt carrying the traffic's
`SLOW_MARKER` waits `SLOW_S` more for its first token; a data plane from `create_app` and the
control plane's `FeedbackLoop` checking every second, with section 5's refit policy and section
5b's accuracy checks (sample rate 0.25, demotion on). Four closed-loop normal clients ask math
questions (`max_tokens` 10, a 500 ms budget; the engines answer in about 0.1 s). Runs, each on
a fresh data plane and Redis prefix:
- without the hostile client, then with it (10% of the requests). Reported for both: breaker
  openings of the (healthy) engines, refits and demotions published, the normal clients'
  budget attainment, and the hostile requests' statuses by kind;
- the cheap engine hangs (no headers ever; the table from a snapshot file, no Redis): seconds
  from the first request until its breaker opens, while the normal clients are served by the
  other pair.
The data plane sends canary items at its defaults (docs/accuracy.md "Canary items"), which the
engines answer as the math key (right at their accuracy); what they cost per pair is reported
beside the canary rows of `bench.hostile.canary` (simulated clock: a 15-point drop within 10
minutes, healthy pairs over hours, the spend at the example prices); `bench.hostile.engines`'
rows (tools-heavy prompts, a 48 MiB `/metrics` page) on their own engines and data planes.
A truly slowed engine (time to refit) and a true 15-point accuracy drop (time to detect and to
demote) come from sections 5 and 5b's scenarios (`bench.feedback.section`,
`bench.feedback.accuracy_drift`), under the same policies, and are reported here beside them
(`Caught`).
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import redis.asyncio as aioredis
from aiohttp import web

from bench.common.in_process import (
    CHAT_PATH,
    Profiled,
    data_plane,
    family_entry,
    family_table,
    static_data_plane,
)
from bench.common.processes import free_port
from bench.feedback.accuracy_drift import CHECKS, AccuracyDriftResult
from bench.feedback.section import REFIT, FeedbackResult
from bench.hostile.canary import CanaryRows, run_canary_rows
from bench.hostile.engines import EngineRows, run_engine_rows
from bench.hostile.traffic import (
    ANSWERS,
    BUDGET_MS,
    CHEAP,
    ESSAY_TOKENS,
    PRICEY,
    SLOW_MARKER,
    SLOW_S,
    Traffic,
)
from contracts.policy import Policy
from contracts.redis_keys import RedisKeys
from contracts.routing_table import RoutingTable
from control_plane.loop.drift import RefitCheck
from control_plane.runtime.feedback_loop import FeedbackLoop
from control_plane.runtime.metrics import ControlPlaneMetrics
from control_plane.runtime.services import Services, make_services
from control_plane.settings import ControlPlaneSettings
from control_plane.settings import RedisSettings as ControlPlaneRedis
from data_plane.app import FEEDBACK, METRICS
from data_plane.checks.canary_items import SHIPPED_ITEMS
from data_plane.settings import (
    DataPlaneSettings,
    FeedbackSettings,
    RedisSettings,
    ScrapeSettings,
    ServerSettings,
    TableSettings,
)
from demo.redis_launcher import private_redis
from simulator import FaultConfig, Fleet, SimFleetConfig, SimPairConfig, run_fleet
from simulator.answer_key import load_answer_keys

ENDPOINTS = (f"{CHEAP}#0", f"{PRICEY}#0")
CLIENTS = 4
TTFT_S, TPOT_S = 0.03, 0.006
PREFILL_S = 0.0001  # the engines' time per input token, as profiled
CHECK_INTERVAL_S = 1.0
SLOW_PATH = FaultConfig(slow_prompt_marker=SLOW_MARKER, slow_prompt_s=SLOW_S)
POLICY = Policy(refit=REFIT, accuracy_check=CHECKS)
# For contrast: the refit evidence rules off (every sample counts at the table quantile, one
# client may supply all of them, a cell of one sample counts, a bare majority decides).
UNGUARDED = POLICY.model_copy(
    update={
        "refit": REFIT.model_copy(
            update={
                "outlier_share": 0.0,
                "max_client_share": 1.0,
                "min_cell_samples": 1,
                "consensus_share": 0.51,
            }
        )
    }
)
DECIDED = ("agree", "disagree")


@dataclass(frozen=True, slots=True)
class Run:
    name: str
    normal: int  # normal answers
    attainment: float  # share of normal requests answered 200 within their budget
    hostile: dict[str, dict[int, int]]  # hostile kind -> status -> count (empty without it)
    breaker_openings: dict[str, int]  # endpoint -> transitions to open
    refits: int = 0  # latency refit tables published by the control plane's loop
    demotions: int = 0  # accuracy demotions published by it
    cheap_share: float = 0.0  # share of the normal answers served by the cheap pair
    checks: int = 0  # accuracy checks of the cheap pair's math answers decided
    checks_unsent: int = 0  # checks of the cheap pair left unsent (queue full, budget spent)
    check_usd: float = 0.0  # the re-asks' cost
    capped: int = 0  # latency samples left out because their client had its share
    loop: dict[str, int] = field(default_factory=dict)  # the loop's check outcomes
    # pair -> (canary items scored, their dollars), at the data plane's default rate
    canary: dict[str, tuple[int, float]] = field(default_factory=dict)
    canary_over_budget: int = 0  # canary items not sent: the pair's budget was spent


@dataclass(frozen=True, slots=True)
class Caught:
    """Sections 5 and 5b's figures (nan: never), under the same refit and check policies."""

    slowed_refit_s: float  # a pair slowed 3x -> its refit table served
    slowed_moved_s: float  # -> traffic left it
    drop_detect_s: float  # a pair losing 15 points -> the alert's condition
    drop_demoted_s: float  # -> floor traffic left it (demoted table)
    healthy_demotions: int  # 5b's demotions while its pair was healthy


@dataclass(frozen=True, slots=True)
class HostileResult:
    seconds: float  # per run
    without: Run
    with_hostile: Run
    unguarded: Run  # with the hostile client, the refit evidence rules off (no target)
    hung_detect_s: float  # first request -> the hung engine's breaker open (nan: never)
    hung_served: float  # share of normal requests answered (200) meanwhile
    caught: Caught
    notes: tuple[str, ...] = field(default=())
    canary: CanaryRows | None = None  # the canary rows, on a simulated clock
    engines: EngineRows | None = None  # tools-heavy prompts and a 48 MiB page (engines.py)


def caught_from(feedback: FeedbackResult, drift: AccuracyDriftResult) -> Caught:
    return Caught(
        feedback.refit_s,
        feedback.moved_s,
        drift.detected_s,
        drift.demoted_s,
        drift.healthy_demotions,
    )


def profiled_table(fleet: Fleet, policy: Policy = POLICY) -> RoutingTable:
    """The engines as profiled: 30 ms to the first token plus 0.1 ms per input token, 6 ms
    per token; accuracy as the math key answers; fp16 the reference."""

    def entry(quant: str, price: float, accuracy: float) -> dict[str, Any]:
        profiled = Profiled(
            TTFT_S, TPOT_S, ttft_per_input_token_s=PREFILL_S, accuracy=accuracy, accuracy_n=400
        )
        return family_entry(quant, fleet.url(f"sim-{quant}"), price, profiled)

    entries = [entry("int4", 1.0, 0.90), entry("fp16", 4.0, 0.97)]
    return family_table(entries, policy=policy, baselines={"fam": PRICEY})


@asynccontextmanager
async def redis_data_plane(redis: RedisSettings) -> AsyncIterator[tuple[str, web.Application]]:
    """A fresh data plane following the table in Redis (feedback every second), once its
    first table is in (bounded: 10 s)."""
    port = free_port()
    settings = DataPlaneSettings(
        server=ServerSettings(host="127.0.0.1", port=port), redis=redis,
        table=TableSettings(poll_interval_s=0.5), feedback=FeedbackSettings(interval_s=1.0),
        instance_id="bench-hostile", log_level="WARNING", scrape=ScrapeSettings(interval_s=0.0),
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    async with data_plane(settings) as app, aiohttp.ClientSession() as session:
        for _ in range(200):
            async with session.get(base + "/readyz") as resp:
                if resp.status == 200:
                    break
            await asyncio.sleep(0.05)
        yield base + CHAT_PATH, app


def _openings(app: web.Application) -> dict[str, int]:
    registry = app[METRICS].registry
    return {
        e: int(registry.get_sample_value(
            "gearbox_circuit_transitions_total", {"endpoint": e, "to": "open"}) or 0)
        for e in ENDPOINTS
    }  # fmt: skip


def _check_counts(app: web.Application) -> tuple[int, int, float]:
    """The cheap pair's accuracy checks: (decided on math, left unsent because the queue was
    full or the budget spent, dollars spent on re-asks)."""
    decided, unsent, usd = 0, 0, 0.0
    for metric in app[METRICS].registry.collect():
        for sample in metric.samples:
            if sample.labels.get("pair") != CHEAP:
                continue
            if sample.name == "gearbox_accuracy_checks_total":
                outcome = sample.labels["outcome"]
                math_decided = sample.labels["category"] == "math" and outcome in DECIDED
                decided += int(sample.value) if math_decided else 0
                unsent += int(sample.value) if outcome in ("dropped", "over_budget") else 0
            elif sample.name == "gearbox_accuracy_check_cost_usd_total":
                usd += sample.value
    return decided, unsent, usd


def _canary_counts(app: web.Application) -> tuple[dict[str, tuple[int, float]], int]:
    """Per pair, canary items scored and their dollars; items left unsent over budget."""
    items: Counter[str] = Counter()
    usd: dict[str, float] = {}
    over = 0
    for metric in app[METRICS].registry.collect():
        for sample in metric.samples:
            pair = sample.labels.get("pair", "")
            if sample.name == "gearbox_canary_items_total":
                outcome = sample.labels["outcome"]
                items[pair] += int(sample.value) if outcome in ("right", "wrong") else 0
                over += int(sample.value) if outcome == "over_budget" else 0
            elif sample.name == "gearbox_canary_cost_usd_total":
                usd[pair] = usd.get(pair, 0.0) + sample.value
    return {p: (items[p], usd.get(p, 0.0)) for p in sorted(set(items) | set(usd))}, over


def _now() -> datetime:
    return datetime.now(UTC)


async def _checks(loop: FeedbackLoop, outcomes: Counter[RefitCheck]) -> None:
    while True:
        outcomes[await loop.check_once()] += 1
        await asyncio.sleep(CHECK_INTERVAL_S)


async def _traffic(url: str, seconds: float, hostile: bool) -> Traffic:
    """The normal clients (and the hostile one) for `seconds`; its last requests answered."""
    async with aiohttp.ClientSession() as session:
        traffic = Traffic(url, session, hostile)
        tasks = [asyncio.create_task(traffic.client()) for _ in range(CLIENTS)]
        await asyncio.sleep(seconds)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await traffic.drain()
    return traffic


def _control_plane(
    redis: aioredis.Redis, url: str, keys: RedisKeys
) -> tuple[Services, FeedbackLoop]:
    settings = ControlPlaneSettings(redis=ControlPlaneRedis(url=url, key_prefix=keys.prefix))
    services = make_services(redis, settings, _now, None)
    return services, FeedbackLoop(services, keys.feedback, ControlPlaneMetrics("bench"), _now)


async def _run(
    name: str, fleet: Fleet, redis_url: str, seconds: float, hostile: bool, policy: Policy = POLICY
) -> Run:
    keys = RedisKeys(f"bench-hostile-{name.replace(' ', '-')}")
    redis = aioredis.Redis.from_url(redis_url)
    services, loop = _control_plane(redis, redis_url, keys)
    outcomes: Counter[RefitCheck] = Counter()
    try:
        await services.policies.put(policy)
        await services.publisher.publish(profiled_table(fleet, policy))
        dp_redis = RedisSettings(url=redis_url, key_prefix=keys.prefix)
        async with redis_data_plane(dp_redis) as (url, app):
            checks = asyncio.create_task(_checks(loop, outcomes))
            try:
                traffic = await _traffic(url, seconds, hostile)
                await asyncio.sleep(1.5)  # the data plane's last feedback window
            finally:
                checks.cancel()
                await asyncio.gather(checks, return_exceptions=True)
            outcomes[await loop.check_once()] += 1
            openings, counts, capped = _openings(app), _check_counts(app), app[FEEDBACK].capped
            canary, over_budget = _canary_counts(app)
    finally:
        await redis.aclose()
    n = len(traffic.normal)
    return Run(
        name,
        n,
        sum(traffic.normal) / n if n else 0.0,
        {kind: dict(statuses) for kind, statuses in sorted(traffic.kinds.items())},
        openings,
        refits=outcomes[RefitCheck.PUBLISHED],
        demotions=outcomes[RefitCheck.DEMOTED],
        cheap_share=traffic.served[CHEAP] / n if n else 0.0,
        checks=counts[0],
        checks_unsent=counts[1],
        check_usd=counts[2],
        capped=capped,
        loop={str(outcome): count for outcome, count in outcomes.most_common()},
        canary=canary,
        canary_over_budget=over_budget,
    )


async def _hung(fleet: Fleet, folder: Path, timeout_s: float) -> tuple[float, float]:
    """Seconds until the hung cheap engine's breaker opens, and the share of the normal
    clients' requests answered (200, by the other pair) meanwhile."""
    fleet.set_faults("sim-int4", FaultConfig(hang_rate=1.0))
    try:
        table = profiled_table(fleet)
        async with static_data_plane(table, folder, "bench-hostile") as (url, app), \
                aiohttp.ClientSession() as session:  # fmt: skip
            traffic = Traffic(url, session, hostile=False)
            started = time.monotonic()
            tasks = [asyncio.create_task(traffic.client()) for _ in range(CLIENTS)]
            detected = float("nan")
            while time.monotonic() - started < timeout_s:
                if _openings(app)[ENDPOINTS[0]] > 0:
                    detected = time.monotonic() - started
                    break
                await asyncio.sleep(0.05)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        fleet.set_faults("sim-int4", FaultConfig())
    answered = traffic.answered
    return detected, (sum(answered) / len(answered) if answered else 0.0)


async def _measure(seconds: float, caught: Caught, canary: CanaryRows) -> HostileResult:
    pairs = [
        SimPairConfig(name=f"sim-{q}", family="fam", quantization=q, ttft_base_s=TTFT_S,
                      ttft_per_input_token_s=PREFILL_S, tpot_base_s=TPOT_S, max_running=64,
                      default_max_tokens=ESSAY_TOKENS, context_length=8192,
                      accuracy={"math": acc}, seed=seed, faults=SLOW_PATH)
        for q, acc, seed in (("int4", 0.90, 2), ("fp16", 0.97, 1))
    ]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="gearbox-hostile-") as tmp, private_redis() as url:
        # The canary items the data plane sends by default are answered as the math key is.
        answers = {**load_answer_keys([SHIPPED_ITEMS]), **ANSWERS}
        async with run_fleet(SimFleetConfig(pairs=pairs), answers=answers) as fleet:
            runs: list[Run] = []
            for name, hostile, policy in RUNS:
                for pair in ("sim-int4", "sim-fp16"):
                    fleet.reset(pair)  # the same answers in the same order
                runs.append(await _run(name, fleet, url, seconds, hostile, policy))
            detect_s, served = await _hung(fleet, Path(tmp), timeout_s=30.0)
    return HostileResult(
        seconds, runs[0], runs[1], runs[2], detect_s, served, caught, canary=canary,
        notes=(
            f"{CLIENTS} closed-loop normal clients (math questions, max_tokens 10, budget "
            f"{BUDGET_MS} ms, 12 API keys); the hostile client (one key) sends one request per "
            f"9 normal answers, 5 of each 10 carrying the slow marker (+{SLOW_S:g} s); engines "
            f"profiled at TTFT 30 ms + 0.1 ms per prompt token, TPOT {TPOT_S * 1000:g} ms; "
            "refit policy of section 5 (min_samples "
            f"{REFIT.min_samples}, max_client_share {REFIT.max_client_share:g}), accuracy "
            f"checks of section 5b (sample rate {CHECKS.sample_rate:g}, min_checks "
            f"{CHECKS.min_checks}, demotion on); the loop checks every {CHECK_INTERVAL_S:g} s; "
            "a breaker opens after 5 consecutive failures.",
            "Refit evidence rules off (the last run, for contrast; no target): outlier_share 0, "
            "max_client_share 1, min_cell_samples 1, consensus_share 0.51.",
        ),
    )  # fmt: skip


RUNS = (
    ("without the hostile client", False, POLICY),
    ("with the hostile client", True, POLICY),
    ("with it, refit evidence rules off", True, UNGUARDED),
)


def run_hostile(quick: bool, caught: Caught) -> HostileResult:
    canary, engines = run_canary_rows(quick), run_engine_rows(quick)
    return replace(asyncio.run(_measure(10.0 if quick else 30.0, caught, canary)), engines=engines)
