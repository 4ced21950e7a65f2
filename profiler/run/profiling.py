"""Profiling one pair end to end: eval sets, preflight, accuracy pass, load sweep, report.

The orchestrator (the one place that mixes policy and I/O): it owns the order of the phases
and the partial-report path. A cancelled run (Ctrl-C under `asyncio.run`) writes what it
measured, marked `provenance.partial = true`, then lets the cancellation go on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

import aiohttp

from contracts.profile_report import Hardware, Prices, ProfileReport
from profiler.engine.client import EngineClient
from profiler.engine.engine_facts import EndpointInfo, FactsTracker, preflight, watch_metrics
from profiler.engine.template_tokens import with_template
from profiler.engine.token_rates import measure_image_tokens, measure_json_chars_per_token
from profiler.errors import EndpointError, InputError
from profiler.evals.accuracy import (
    EvalItem,
    EvalResult,
    EvalSetError,
    eval_set_identity,
    labelled_prompts,
    parse_eval_set,
    summarize_accuracy,
)
from profiler.evals.decisions import MAX_LOOKS, DecisionTarget
from profiler.evals.traffic import Traffic, category_order
from profiler.load.engine_gone import DeadEngineGuard, engine_gone_in
from profiler.load.runner import Calibration, LevelRecorder, LoadRunner, run_evals
from profiler.load.workload import LoadLevel
from profiler.reports.report import (
    Measured,
    RunFacts,
    build_document,
    validate_report,
    write_document,
)
from profiler.run.progress import Progress
from profiler.run.sequential import Order, ask_until_decided
from profiler.settings import ProfilerSettings

logger = logging.getLogger(__name__)

EVALSET_DIR = Path(__file__).parents[1] / "evalsets"


def builtin_evalsets() -> tuple[Path, ...]:
    """The eval sets shipped with the profiler (one JSONL file per category)."""
    return tuple(sorted(EVALSET_DIR.glob("*.jsonl")))


@dataclass(frozen=True, slots=True)
class PairPlan:
    """What to profile and how. `engine_version` / `context_length` None = detect them."""

    family: str
    quantization: str
    served_model_name: str
    endpoints: tuple[str, ...]
    hardware: Hardware
    prices: Prices | None
    sweep: tuple[LoadLevel, ...]
    evalsets: tuple[Path, ...]
    engine: str = "vllm"
    engine_version: str | None = None
    context_length: int | None = None
    out: Path | None = None
    # `--until-decided` asks eval items in batches until `decide`'s floors are decided
    # (None: every item of the eval sets, once); `first_items` per category to start with.
    decide: DecisionTarget | None = None
    first_items: int = 100
    # `--item-budget`: items asked after the first ones, at most (None: no limit), spent
    # first where `--traffic`'s mix says deciding moves the most (profiler/evals/traffic.py).
    item_budget: int | None = None
    traffic: Traffic | None = None

    @property
    def pair(self) -> str:
        return f"{self.family}@{self.quantization}"


@dataclass(frozen=True, slots=True)
class Runtime:
    """The process-wide parts a run uses, built by the composition root."""

    session: aiohttp.ClientSession
    settings: ProfilerSettings
    progress: Progress
    git_sha: str | None = None
    host: str | None = None


@dataclass(slots=True)
class RunState:
    """Everything measured so far; filled in place, so an interrupted run keeps it."""

    recorders: list[LevelRecorder]
    evals: list[EvalResult] = field(default_factory=list)
    tracker: FactsTracker = field(default_factory=lambda: FactsTracker([]))
    calibration: Calibration = field(default_factory=Calibration)
    json_chars_per_token: float | None = None
    image_tokens: int | None = None


def _order(plan: PairPlan) -> Order | None:
    """The order `--traffic` gives further items: most traffic-moving category first."""
    traffic, decide = plan.traffic, plan.decide
    if traffic is None or decide is None:
        return None
    planned = DecisionTarget(decide.floors, decide.confidence, decide.min_items, MAX_LOOKS)
    return lambda counts: category_order(plan.pair, counts, plan.prices, traffic, planned)


def load_eval_sets(paths: Sequence[Path]) -> tuple[tuple[EvalItem, ...], str, str]:
    """(items, eval-set id, sha256) of the files; every bad line is named by file and line."""
    if not paths:
        raise InputError(["evalset: no eval set given"])
    items: list[EvalItem] = []
    problems: list[str] = []
    files: list[tuple[str, bytes]] = []
    for path in paths:
        try:
            data = path.read_bytes()
        except OSError as err:
            problems.append(f"{path}: cannot read: {err.strerror}")
            continue
        files.append((path.name, data))
        try:
            items += parse_eval_set(data.decode("utf-8", errors="replace"), str(path))
        except EvalSetError as err:
            problems += err.problems
    if problems:
        raise InputError(problems)
    ident, sha = eval_set_identity(files)
    return tuple(items), ident, sha


async def profile_pair(plan: PairPlan, rt: Runtime) -> ProfileReport:
    """Profile one pair and return its validated report (also written to `plan.out`).

    Raises InputError / EndpointError before any load is sent when the inputs or the
    endpoints are wrong. On cancellation, writes the partial report and re-raises.
    """
    started_at = datetime.now(UTC)
    items, set_id, set_sha = load_eval_sets(plan.evalsets)
    timeout = rt.settings.request_timeout_s
    clients = [EngineClient(rt.session, u, plan.served_model_name, timeout) for u in plan.endpoints]
    infos = [await preflight(c, rt.settings.preflight_timeout_s) for c in clients]
    origin = (rt.git_sha, rt.host)
    facts = run_facts(plan, infos[0], (set_id, set_sha), started_at, origin, items)
    # what the chat template adds around the counted text, where the tokenizer was found
    facts = replace(facts, tokenizer=await with_template(clients[0], facts.tokenizer))
    state = RunState(recorders=[LevelRecorder(level) for level in plan.sweep])
    try:
        await _measure(plan, clients[0], items, state, rt)
    except asyncio.CancelledError:
        write_partial(plan, facts, state)
        raise
    except ExceptionGroup as group:  # the task groups of the eval pass and the load levels
        gone = engine_gone_in(group)
        if gone is None:
            raise
        write_partial(plan, facts, state)
        raise gone from None
    return finish_report(plan, facts, state)


def run_facts(
    plan: PairPlan,
    info: EndpointInfo,
    eval_set: tuple[str, str],
    started_at: datetime,
    origin: tuple[str | None, str | None],
    items: Sequence[EvalItem] = (),
) -> RunFacts:
    """The run's identity and provenance. `eval_set` = (id, sha256); `origin` = (git sha,
    host); `items` the eval items, whose prompts and categories go into the report for the
    control plane's category classifier. Flags win over what the endpoint reports; a fact
    nobody knows is an InputError."""
    context_length = plan.context_length or info.context_length
    version = plan.engine_version or info.engine_version
    problems = []
    if context_length is None:
        problems.append(
            f"context length: {info.url}/v1/models reports no max_model_len; "
            "pass --context-length (or context_length in the fleet file)"
        )
    if version is None:
        problems.append(
            f"engine version: {info.url} reports none at /version or /metrics; "
            "pass --engine-version (or engine_version in the fleet file)"
        )
    if context_length is None or version is None:
        raise InputError(problems)
    return RunFacts(
        family=plan.family,
        quantization=plan.quantization,
        served_model_name=plan.served_model_name,
        endpoints=plan.endpoints,
        hardware=plan.hardware,
        prices=plan.prices,
        context_length=context_length,
        engine=plan.engine,
        engine_version=version,
        eval_set_id=eval_set[0],
        eval_set_sha256=eval_set[1],
        started_at=started_at,
        git_sha=origin[0],
        host=origin[1],
        eval_prompts=labelled_prompts(items),
        tokenizer=info.tokenizer,
    )


async def _measure(
    plan: PairPlan,
    client: EngineClient,
    items: Sequence[EvalItem],
    state: RunState,
    rt: Runtime,
) -> None:
    """Accuracy first (short, and it warms the engine), then the load levels in order, while
    `/metrics` is scraped in the background. Requests go through a `DeadEngineGuard`: an
    engine that dies stops the run at once (EngineGoneError inside the task groups' errors)."""
    settings = rt.settings
    asker = DeadEngineGuard(client, client.base_url)
    async with asyncio.TaskGroup() as group:
        watcher = group.create_task(
            watch_metrics(client, state.tracker, settings.metrics_interval_s)
        )
        with rt.progress.bar(len(items), f"{plan.pair} accuracy") as advance:
            if plan.decide is None:
                await run_evals(asker, items, settings.eval_concurrency, state.evals, advance)
            else:
                await ask_until_decided(
                    asker,
                    items,
                    plan.decide,
                    plan.first_items,
                    settings.eval_concurrency,
                    state.evals,
                    advance,
                    plan.item_budget,
                    _order(plan),
                )
        runner = LoadRunner(asker, state.calibration, settings.max_in_flight, settings.seed)
        total = sum(r.level.total for r in state.recorders)
        with rt.progress.bar(total, f"{plan.pair} load") as advance:
            for index, recorder in enumerate(state.recorders):
                await runner.run_level(index, recorder, advance)
                logger.info(
                    "%s: level %d/%d done (%s): %d ok, %d errors",
                    plan.pair,
                    index + 1,
                    len(state.recorders),
                    recorder.level.label,
                    len(recorder.timings),
                    recorder.errors,
                )
        state.json_chars_per_token = await measure_json_chars_per_token(client)
        state.image_tokens = await measure_image_tokens(client)
        watcher.cancel()


def _summarize(plan: PairPlan, state: RunState) -> Measured:
    """The measurements as report sections; levels and evals with failures are logged."""
    samples = []
    for recorder in state.recorders:
        if recorder.errors:
            logger.warning(
                "%s: %s: %d of %d measured requests failed (first: %s)",
                plan.pair,
                recorder.level.label,
                recorder.errors,
                recorder.errors + len(recorder.timings),
                recorder.error_reasons[0],
            )
        sample = recorder.sample()
        if sample is not None:
            samples.append(sample)
    failed_evals = [r for r in state.evals if r.error]
    if failed_evals:
        logger.warning(
            "%s: %d eval requests failed and count as wrong (first: %s)",
            plan.pair,
            len(failed_evals),
            failed_evals[0].error,
        )
    return Measured(
        latency=tuple(samples),
        accuracy=summarize_accuracy(state.evals, 1 if plan.decide is None else MAX_LOOKS),
        chars_per_token=state.calibration.chars_per_token,
        json_chars_per_token=state.json_chars_per_token,
        image_tokens=state.image_tokens,
        engine_facts=state.tracker.engine_facts(),
        memory=state.tracker.memory(),
    )


def finish_report(plan: PairPlan, facts: RunFacts, state: RunState) -> ProfileReport:
    """Summarize, validate and write the report of a run that went to the end."""
    measured = _summarize(plan, state)
    if not measured.latency:
        errors = sum(r.errors for r in state.recorders)
        first = next((r.error_reasons[0] for r in state.recorders if r.error_reasons), "-")
        raise EndpointError(
            f"{plan.endpoints[0]}: no load request succeeded ({errors} failed; first: {first})"
        )
    document = build_document(facts, measured, datetime.now(UTC), partial=False)
    report = validate_report(document, plan.pair)
    if plan.out is not None:
        write_document(plan.out, report.model_dump(mode="json"))
    return report


def write_partial(plan: PairPlan, facts: RunFacts, state: RunState) -> None:
    """Write what an interrupted run measured, marked partial. A document with a section
    still empty cannot validate as ProfileReport; it is written anyway, so nothing is lost."""
    if plan.out is None:
        return
    document = build_document(facts, _summarize(plan, state), datetime.now(UTC), partial=True)
    try:
        write_document(plan.out, document)
    except OSError as err:  # keep the interruption the error the caller sees
        logger.error("%s: interrupted; cannot write %s: %s", plan.pair, plan.out, err.strerror)
        return
    empty = [k for k in ("latency", "accuracy") if not document[k]]
    note = f" (incomplete: no {' or '.join(empty)} yet)" if empty else ""
    logger.warning("%s: interrupted; partial report written to %s%s", plan.pair, plan.out, note)
