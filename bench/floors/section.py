"""Section 3b: floors near the truth, without X-Task-Category, graded against TRUE accuracy.

A six-pair simulated fleet whose true accuracies sit 2-4 points from the policy's floors (the
truths of `bench.floors.attainment`, the speeds, batch sizes and prices of the routing-quality
fleet) -> profiled by the profiler on the shipped generated eval sets (100 items per
category; its reports carry the eval prompts) -> `control_plane.build_table` (bounds at the
policy's floor_confidence, and the classifier trained on those prompts) -> data plane ->
a trace of prompts the profiler never asked (the held-out and hand-written sets) whose
floors are the policy's (no X-Min-Accuracy), replayed without X-Task-Category at 1x and 2x and with
it at 1x -> each answer graded by the serving pair's configured truth (`bench.floors.score`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common.machine import Cores, Pinning
from bench.floors import attainment as fa
from bench.floors.edge import (
    EdgeOutcome,
    doubt_costs,
    edge_floors,
    grade_edge,
    provable_oracle,
    provable_pair,
)
from bench.floors.evalsets import (
    eval_files,
    hand_written_files,
    holdout_files,
    larger_evalsets,
    trace_items,
)
from bench.floors.score import TruePair, TruthOutcome, grade_oracle, grade_truth
from bench.quality import fleet as qf
from bench.quality.section import check_serving, data_plane, profile_fleet, run_replay, simulator
from bench.quality.trace import TraceRequest, make_trace
from contracts.policy import load_policy
from contracts.routing_table import RoutingTable
from control_plane.build.table import build_table
from data_plane.decision.compile import compile_table
from data_plane.request.category import classify_text, decide_category

SEED = 20261125
NOMINAL_RPS = 30.0
FLOORS = fa.FLOORS


# The routing-quality fleet's engines and prices, with the near-floor truths (same order:
# 8B fp16, fp8, int8, int4; 70B int4, fp8).
def _near_floor(p: qf.SimPair, truth: fa.TruePair) -> qf.SimPair:
    chat, extraction, code, math, reasoning = truth.accuracy
    return replace(p, accuracy=(chat, extraction, code, math, reasoning))


PAIRS = tuple(_near_floor(p, t) for p, t in zip(qf.PAIRS, fa.FLEET, strict=True))
POLICY: dict[str, Any] = {
    **qf.POLICY,
    "categories": {
        c: {"min_accuracy": FLOORS[c], "typical_output_tokens": 48} for c in qf.CATEGORIES
    },
}
NO_HEADER, HEADER = "no header", "header"
# The same trace without the header on a table profiled with --until-decided (first 100
# items per category, then batches from the larger eval file until no floor is undecided).
UNTIL_DECIDED = "no header, --until-decided"
LARGER_EXTRA_ITEMS = 900  # per category, after the shipped 100
RUNS = ((NO_HEADER, 1.0), (NO_HEADER, 2.0), (HEADER, 1.0))
# Another trace, with explicit X-Min-Accuracy floors 1-3 points under some pairs' truths and
# the category sent (`bench.floors.edge`), on the 100-item table at 1x.
EXPLICIT = "explicit floors"
# The explicit-floor trace again without X-Task-Category (the floor header still sent).
EXPLICIT_NO_HEADER = "explicit floors, no header"
EDGE_RUNS = ((EXPLICIT, 1.0), (EXPLICIT_NO_HEADER, 1.0), (EXPLICIT_NO_HEADER, 2.0))
OMITTED = {
    NO_HEADER: ("X-Min-Accuracy", "X-Task-Category"),
    HEADER: ("X-Min-Accuracy",),
    UNTIL_DECIDED: ("X-Min-Accuracy", "X-Task-Category"),
    EXPLICIT: (),
    EXPLICIT_NO_HEADER: ("X-Task-Category",),
}


@dataclass(frozen=True, slots=True)
class PairTruth:
    pair: str
    output_usd_per_mtok: float
    truth: dict[str, float]
    bound: dict[str, float]  # what the table routes on (docs/accuracy.md)
    measured: dict[str, str]  # right/n per category


@dataclass(frozen=True, slots=True)
class FloorScenarioResult:
    seed: int
    trace_requests: int
    trace_prompts: int  # distinct prompts the trace draws from (none the profiler asked)
    eval_items: dict[str, int]  # profiled items per category
    nominal_rps: float
    floors: dict[str, float]
    floor_confidence: float
    classifier_cv_accuracy: float | None
    pairs: tuple[PairTruth, ...]
    outcomes: tuple[TruthOutcome, ...]
    oracle: TruthOutcome
    decided_pairs: tuple[PairTruth, ...] = ()  # the --until-decided table's pairs
    edge: EdgeOutcome | None = None  # the explicit-floor trace (`bench.floors.edge`)
    edge_runs: tuple[EdgeOutcome, ...] = ()  # the same trace without X-Task-Category, 1x, 2x
    # The cheapest-provable oracle of the near-floor trace on each table ("100 items",
    # "--until-decided"): cost per 1,000 requests, and the requests nothing proves.
    provable_oracle: dict[str, tuple[float, int]] = field(default_factory=dict)
    # The requests the classifier abstains on, per table: (plausible categories joined by
    # "+", the pair a strict idle decision under doubt gives, requests, their cost per 1,000
    # requests of the trace).
    doubt_mix: dict[str, tuple[tuple[str, str, int, float], ...]] = field(default_factory=dict)

    def outcome(self, mode: str, load: float) -> TruthOutcome | None:
        return next((o for o in self.outcomes if o.mode == mode and o.load == load), None)


def true_pairs() -> dict[str, TruePair]:
    return {
        p.pair: TruePair(
            pair=p.pair,
            input_usd_per_mtok=p.output_usd_per_mtok / 4,  # as qf.profiler_fleet prices them
            output_usd_per_mtok=p.output_usd_per_mtok,
            ttft_base_s=p.ttft_base_s,
            ttft_per_input_token_s=p.ttft_per_input_token_s,
            tpot_base_s=p.tpot_base_s,
            accuracy=dict(zip(qf.CATEGORIES, p.accuracy, strict=True)),
        )
        for p in PAIRS
    }


def classify_trace(
    table: RoutingTable, trace: Sequence[TraceRequest]
) -> dict[int, tuple[str, bool]]:
    """Per request: the table classifier's top category and whether it abstains, with the
    data plane's own code (every replica classifies identically, docs/classifier.md)."""
    compiled = compile_table(table)
    scorer = compiled.classifier
    routed = {}
    for req in trace:
        probabilities, _ = classify_text(scorer, req.prompt)
        top = scorer.categories[max(range(len(probabilities)), key=probabilities.__getitem__)]
        _, doubt = decide_category(
            scorer.categories,
            probabilities,
            compiled.categories,
            table.policy.category_confidence,
            table.policy.doubt_category,
        )
        routed[req.id] = (top, doubt is not None)
    return routed


def _replay(
    workdir: Path, url: str, trace: Sequence[TraceRequest], mode: str, load: float, cpus: Cores
) -> list[dict[str, Any]]:
    tag = f"{mode.replace(' ', '-')}-{load:g}x"
    trace_file = workdir / f"trace-{tag}.jsonl"
    lines = ({**r.as_dict(), "omit_headers": list(OMITTED[mode])} for r in trace)
    trace_file.write_text("".join(json.dumps(line) + "\n" for line in lines))
    models = workdir / f"models-{tag}.json"
    models.write_text(json.dumps(["auto"] * len(trace)))
    out = run_replay(workdir, url, (trace_file, models), tag, load, cpus)
    return [json.loads(line) for line in out.read_text().splitlines() if line]


def _pair_truths(table: RoutingTable, truths: dict[str, TruePair]) -> tuple[PairTruth, ...]:
    return tuple(
        PairTruth(
            pair=e.pair,
            output_usd_per_mtok=e.output_usd_per_mtok,
            truth=dict(truths[e.pair].accuracy) if e.pair in truths else {},
            bound=dict(e.accuracy_bound),
            measured={c: f"{e.accuracy_right.get(c, '?')}/{n}" for c, n in e.accuracy_n.items()},
        )
        for e in table.entries
    )


def _profile_and_build(
    workdir: Path,
    urls: dict[str, str],
    evals: list[Path],
    quick: bool,
    extra_args: Sequence[str] = (),
) -> RoutingTable:
    """The profiler's reports (with their eval prompts) -> the control plane's table."""
    workdir.mkdir(parents=True, exist_ok=True)
    reports = profile_fleet(workdir, urls, evals, quick, PAIRS, extra_args)
    table = build_table(reports, load_policy(POLICY), datetime.now(UTC))
    if table.classifier is None:
        raise RuntimeError("the table ships no classifier: the reports carried no eval prompts")
    return table


def _serve_and_grade(
    workdir: Path,
    table: RoutingTable,
    trace: Sequence[TraceRequest],
    runs: Sequence[tuple[str, float]],
    pinning: Pinning,
) -> list[TruthOutcome]:
    routed = classify_trace(table, trace)
    truths = true_pairs()
    outcomes = []
    with data_plane(workdir, table, pinning.proxy) as url:
        check_serving(url, trace[0])
        for mode, load in runs:
            print(f"     replay near-floor trace, {mode}, at {load:g}x", flush=True)
            results = _replay(workdir, url, trace, mode, load, pinning.aux)
            seen = {} if mode == HEADER else routed
            outcomes.append(grade_truth(mode, load, trace, results, truths, seen))
    return outcomes


def _serve_edge(
    workdir: Path, table: RoutingTable, trace: Sequence[TraceRequest], pinning: Pinning
) -> list[EdgeOutcome]:
    """The explicit-floor trace with the category sent at 1x, then without it at 1x and 2x;
    `provable` is under each request's true category either way."""
    workdir.mkdir(parents=True, exist_ok=True)
    compiled = compile_table(table)
    provable = {req.id: provable_pair(compiled, req) for req in trace}
    outcomes = []
    with data_plane(workdir, table, pinning.proxy) as url:
        check_serving(url, trace[0])
        for mode, load in EDGE_RUNS:
            print(f"     replay the {mode} trace ({len(trace)} requests) at {load:g}x", flush=True)
            results = _replay(workdir, url, trace, mode, load, pinning.aux)
            outcomes.append(grade_edge(trace, results, true_pairs(), provable, mode, load))
    return outcomes


def run_floor_scenario(pinning: Pinning, workdir: Path, quick: bool) -> FloorScenarioResult:
    workdir.mkdir(parents=True, exist_ok=True)
    evals, holdout = eval_files(), holdout_files()
    larger = larger_evalsets(workdir / "larger-evals", LARGER_EXTRA_ITEMS, SEED)
    items = trace_items([*holdout, *hand_written_files()], larger)
    floors = {c: (FLOORS[c],) for c in qf.CATEGORIES}
    trace = make_trace(items, floors, 300 if quick else 1500, NOMINAL_RPS, SEED)
    policy_file = workdir / "policy.yaml"  # JSON is YAML
    policy_file.write_text(json.dumps(POLICY))
    until_decided = ["--until-decided", "--policy", str(policy_file), "--first-items", "100"]
    with simulator(workdir, [*larger, *holdout], pinning.aux, PAIRS) as urls:
        print("     profiling the near-floor fleet (100 items per category)", flush=True)
        table = _profile_and_build(workdir / "fixed", urls, evals, quick)
        outcomes = _serve_and_grade(workdir / "fixed", table, trace, RUNS, pinning)
        explicit = edge_floors(list(true_pairs().values()), qf.CATEGORIES)
        edge_trace = make_trace(items, explicit, len(trace), NOMINAL_RPS, SEED + 24)
        edge, *edge_runs = _serve_edge(workdir / "edge", table, edge_trace, pinning)
        print("     profiling it again with --until-decided from a larger eval file", flush=True)
        decided = _profile_and_build(workdir / "decided", urls, larger, quick, until_decided)
        runs = ((UNTIL_DECIDED, 1.0),)
        outcomes += _serve_and_grade(workdir / "decided", decided, trace, runs, pinning)
    return FloorScenarioResult(
        seed=SEED,
        trace_requests=len(trace),
        trace_prompts=sum(len(v) for v in items.values()),
        eval_items={c: len(v) for c, v in qf.read_items(evals).items()},
        nominal_rps=NOMINAL_RPS,
        floors=dict(FLOORS),
        floor_confidence=table.policy.floor_confidence,
        classifier_cv_accuracy=table.classifier.training.cv_accuracy if table.classifier else None,
        pairs=_pair_truths(table, true_pairs()),
        outcomes=tuple(outcomes),
        oracle=grade_oracle(trace, list(true_pairs().values())),
        decided_pairs=_pair_truths(decided, true_pairs()),
        edge=edge,
        edge_runs=tuple(edge_runs),
        provable_oracle={
            "100 items": provable_oracle(compile_table(table), trace, true_pairs()),
            "--until-decided": provable_oracle(compile_table(decided), trace, true_pairs()),
        },
        doubt_mix={
            "100 items": _doubt_mix(table, trace),
            "--until-decided": _doubt_mix(decided, trace),
        },
    )


def _doubt_mix(
    table: RoutingTable, trace: Sequence[TraceRequest]
) -> tuple[tuple[str, str, int, float], ...]:
    found = doubt_costs(compile_table(table), trace, true_pairs())
    n = max(len(trace), 1)
    return tuple(
        ("+".join(plausible), pair, count, cost / n * 1000)
        for (plausible, pair), (count, cost) in sorted(found.items())
    )
