"""Section 3b: floors near the truth, without X-Task-Category, graded against TRUE accuracy.

A six-pair simulated fleet whose true accuracies sit 2-4 points from the policy's floors (the
truths of `bench.floor_attainment`, the speeds, batch sizes and prices of the routing-quality
fleet) -> profiled by the profiler on the shipped generated eval sets (100 items per
category; its reports carry the eval prompts) -> `control_plane.build_table` (bounds at the
policy's floor_confidence, and the classifier trained on those prompts) -> data plane ->
a trace of held-out prompts (profiler/evalsets/holdout, never an eval prompt) whose floors
are the policy's (no X-Min-Accuracy), replayed without X-Task-Category at 1x and 2x and with
it at 1x -> each answer graded by the serving pair's configured truth (`bench.floor_score`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import floor_attainment as fa
from bench import quality_fleet as qf
from bench.floor_score import TruePair, TruthOutcome, grade_oracle, grade_truth
from bench.machine import Cores, Pinning, pinned
from bench.processes import running
from bench.quality import check_serving, data_plane, profile_fleet, simulator
from bench.trace import TraceRequest, make_trace
from contracts.policy import load_policy
from contracts.routing_table import RoutingTable
from control_plane.table import build_table
from data_plane.decision.compile import compile_table
from data_plane.request.category import classify_text, decide_category

SEED = 20261125
NOMINAL_RPS = 30.0
EVALSETS = Path(__file__).resolve().parent.parent / "profiler" / "evalsets"
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
RUNS = ((NO_HEADER, 1.0), (NO_HEADER, 2.0), (HEADER, 1.0))
OMITTED = {
    NO_HEADER: ("X-Min-Accuracy", "X-Task-Category"),
    HEADER: ("X-Min-Accuracy",),
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
    trace_prompts: int  # distinct held-out prompts the trace draws from
    eval_items: dict[str, int]  # profiled items per category
    nominal_rps: float
    floors: dict[str, float]
    floor_confidence: float
    classifier_cv_accuracy: float | None
    pairs: tuple[PairTruth, ...]
    outcomes: tuple[TruthOutcome, ...]
    oracle: TruthOutcome

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


def eval_files() -> list[Path]:
    return sorted(EVALSETS.glob("*-generated.jsonl"))


def trace_items(holdout: list[Path], evals: list[Path]) -> dict[str, list[dict[str, Any]]]:
    """Held-out items by category, less any whose prompt is also an eval prompt."""
    seen = {json.loads(line)["prompt"] for p in evals for line in p.read_text().splitlines()}
    items = qf.read_items(holdout)
    return {c: [i for i in items[c] if i["prompt"] not in seen] for c in items}


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
    out = workdir / f"replay-{tag}.jsonl"
    args = [sys.executable, "-m", "bench.replay", "--trace", str(trace_file)]
    args += ["--models", str(models), "--url", url + "/v1/chat/completions"]
    args += ["--load", str(load), "--out", str(out)]
    log = workdir / f"replay-{tag}.log"
    with running(pinned(args, cpus), log) as proc:
        code = proc.wait(timeout=900)
    if code != 0:
        raise RuntimeError(f"replay failed ({code}):\n{log.read_text()[-2000:]}")
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


def run_floor_scenario(pinning: Pinning, workdir: Path, quick: bool) -> FloorScenarioResult:
    workdir.mkdir(parents=True, exist_ok=True)
    evals, holdout = eval_files(), sorted((EVALSETS / "holdout").glob("*.jsonl"))
    items = trace_items(holdout, evals)
    floors = {c: (FLOORS[c],) for c in qf.CATEGORIES}
    trace = make_trace(items, floors, 300 if quick else 1500, NOMINAL_RPS, SEED)
    truths = true_pairs()
    policy = load_policy(POLICY)
    with simulator(workdir, [*evals, *holdout], pinning.aux, PAIRS) as urls:
        print("     profiling the near-floor fleet", flush=True)
        reports = profile_fleet(workdir, urls, evals, quick, PAIRS)
        table = build_table(reports, policy, datetime.now(UTC))
        if table.classifier is None:
            raise RuntimeError("the table ships no classifier: the reports carried no eval prompts")
        routed = classify_trace(table, trace)
        outcomes = []
        with data_plane(workdir, table, pinning.proxy) as url:
            check_serving(url, trace[0])
            for mode, load in RUNS:
                print(f"     replay near-floor trace, {mode}, at {load:g}x", flush=True)
                results = _replay(workdir, url, trace, mode, load, pinning.aux)
                seen = routed if mode == NO_HEADER else {}
                outcomes.append(grade_truth(mode, load, trace, results, truths, seen))
    training = table.classifier.training
    return FloorScenarioResult(
        seed=SEED,
        trace_requests=len(trace),
        trace_prompts=sum(len(v) for v in items.values()),
        eval_items={c: sum(1 for _ in qf.read_items(evals)[c]) for c in qf.CATEGORIES},
        nominal_rps=NOMINAL_RPS,
        floors=dict(FLOORS),
        floor_confidence=policy.floor_confidence,
        classifier_cv_accuracy=training.cv_accuracy,
        pairs=_pair_truths(table, truths),
        outcomes=tuple(outcomes),
        oracle=grade_oracle(trace, list(truths.values())),
    )
