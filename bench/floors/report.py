"""Markdown and target checks for the near-floor scenario (bench/floors/section.py); PURE."""

from __future__ import annotations

import math

from bench.common import targets as t
from bench.common.check import Check
from bench.common.stats import ratio
from bench.floors.edge import EdgeOutcome
from bench.floors.score import TruthOutcome
from bench.floors.section import (
    EXPLICIT_NO_HEADER,
    HEADER,
    NO_HEADER,
    UNTIL_DECIDED,
    FloorScenarioResult,
)

SECTION = "floors"


def _missing(name: str, target: str) -> Check:
    return Check(SECTION, name, math.nan, math.nan, math.nan, "", target, False, "not measured")


def _slo(r: FloorScenarioResult, mode: str, load: float, limit: float) -> Check:
    header = "with" if mode == HEADER else "without"
    name = f"SLO attainment (true floor and budget) {header} X-Task-Category at {load:g}x"
    target = f">= {limit * 100:g}%"
    o = r.outcome(mode, load)
    if o is None:
        return _missing(name, target)
    detail = (
        f"floor {o.floor_attainment * 100:.1f}%, budget {o.budget_attainment * 100:.1f}%; "
        "baseline = the oracle (true accuracies, no queueing)"
    )
    return Check(
        SECTION,
        name,
        o.slo_attainment * 100,
        r.oracle.slo_attainment * 100,
        ratio(o.slo_attainment, r.oracle.slo_attainment),
        "%",
        target,
        o.slo_attainment >= limit,
        detail,
    )


def _floor(r: FloorScenarioResult, load: float) -> Check:
    name = f"floor attainment by true accuracy without X-Task-Category at {load:g}x"
    target = f">= {t.FLOOR_ATTAINMENT * 100:g}%"
    o = r.outcome(NO_HEADER, load)
    if o is None:
        return _missing(name, target)
    misses = ", ".join(f"{c} {n}" for c, n in o.floor_misses.items()) or "none"
    return Check(
        SECTION,
        name,
        o.floor_attainment * 100,
        r.oracle.floor_attainment * 100,
        ratio(o.floor_attainment, r.oracle.floor_attainment),
        "%",
        target,
        o.floor_attainment >= t.FLOOR_ATTAINMENT,
        f"misses by true category: {misses}; classifier right on "
        f"{o.classifier_accuracy * 100:.1f}% of the trace",
    )


def _cost(r: FloorScenarioResult, mode: str = NO_HEADER) -> Check:
    name = "cost per 1,000 requests without X-Task-Category at 1x vs the oracle"
    if mode == UNTIL_DECIDED:
        name += ", profiled --until-decided from a larger eval file"
    target = f"<= {t.FLOOR_COST_VS_ORACLE:g}x the oracle"
    o = r.outcome(mode, 1.0)
    if o is None:
        return _missing(name, target)
    data = (
        f"items per category as --until-decided asked them; SLO {o.slo_attainment * 100:.1f}%, "
        f"floor {o.floor_attainment * 100:.1f}%"
        if mode == UNTIL_DECIDED
        else f"{min(r.eval_items.values(), default=0)} items per category"
    )
    x = ratio(o.cost_usd_per_1k, r.oracle.cost_usd_per_1k)
    return Check(
        SECTION,
        name,
        o.cost_usd_per_1k,
        r.oracle.cost_usd_per_1k,
        x,
        "USD",
        target,
        x <= t.FLOOR_COST_VS_ORACLE,
        f"the table's bound at {r.floor_confidence:.0%} on {data}"
        + _provable_note(r, "--until-decided" if mode == UNTIL_DECIDED else "100 items", o),
    )


def _provable_note(r: FloorScenarioResult, table: str, o: TruthOutcome) -> str:
    """The cheapest-provable oracle of this table against the truth oracle: what any router
    keeping the guarantee on every request pays at least (bench/floors/edge.py)."""
    found = r.provable_oracle.get(table)
    if found is None:
        return ""
    cost, unprovable = found
    return (
        f"; cheapest-provable oracle {cost:.4f} $/1k = "
        f"{ratio(cost, r.oracle.cost_usd_per_1k):.3f}x the truth oracle "
        f"({unprovable} requests nothing proves), Gearbox {ratio(o.cost_usd_per_1k, cost):.3f}x it"
    )


def _edge_no_header(r: FloorScenarioResult) -> list[Check]:
    """The explicit-floor trace without X-Task-Category: overall SLO at 1x and 2x, and cost on
    provable requests against the cheapest provable pair at 1x."""
    checks = []
    for load in (1.0, 2.0):
        name = f"explicit floors: SLO attainment without X-Task-Category at {load:g}x"
        target = f">= {t.EDGE_NO_HEADER_SLO * 100:g}%"
        e = _edge_run(r, EXPLICIT_NO_HEADER, load)
        if e is None:
            checks.append(_missing(name, target))
            continue
        detail = (
            f"provable {e.provable_slo * 100:.1f}%, truth-feasible unprovable "
            f"{e.unprovable_feasible_slo * 100:.1f}%; floor attainment under the guarantee "
            f"{e.guaranteed_floor * 100:.1f}%"
        )
        checks.append(
            Check(
                SECTION,
                name,
                e.slo_attainment * 100,
                math.nan,
                math.nan,
                "%",
                target,
                e.slo_attainment >= t.EDGE_NO_HEADER_SLO,
                detail,
            )
        )
    name = "explicit floors: cost on provable requests vs the cheapest provable pair, without "
    name += "X-Task-Category at 1x"
    target = f"<= {t.EDGE_COST_VS_PROVABLE:g}x"
    e = _edge_run(r, EXPLICIT_NO_HEADER, 1.0)
    if e is None:
        return [*checks, _missing(name, target)]
    x = e.provable_cost_ratio
    detail = (
        f"whole trace {e.cost_usd_per_1k:.4f} $/1k req = "
        f"{ratio(e.cost_usd_per_1k, e.oracle_cost_usd_per_1k):.2f}x the truth oracle's "
        f"{e.oracle_cost_usd_per_1k:.4f}"
    )
    return [
        *checks,
        Check(SECTION, name, x, 1.0, x, "x", target, x <= t.EDGE_COST_VS_PROVABLE, detail),
    ]


def _edge_run(r: FloorScenarioResult, mode: str, load: float) -> EdgeOutcome | None:
    return next((e for e in r.edge_runs if e.mode == mode and e.load == load), None)


def _edge(r: FloorScenarioResult) -> list[Check]:
    """The explicit-floor trace's checks (bench/floors/edge.py)."""
    names = (
        ("explicit floors: SLO attainment on provable requests", "%", t.EDGE_PROVABLE_SLO),
        (
            "explicit floors: SLO attainment on truth-feasible, unprovable requests",
            "%",
            t.EDGE_UNPROVABLE_SLO,
        ),
        (
            "explicit floors: floor attainment of answers served under the guarantee",
            "%",
            t.EDGE_GUARANTEED_FLOOR,
        ),
    )
    e = r.edge
    if e is None:
        return [_missing(n, f">= {x * 100:g}%") for n, _, x in names] + [
            _missing("explicit floors: cost on provable requests vs the cheapest provable pair", "")
        ]
    figures = (
        (e.provable_slo, f"{e.provable_share * 100:.1f}% of {e.requests} requests provable"),
        (e.unprovable_feasible_slo, f"{e.unprovable_feasible} such requests"),
        (e.guaranteed_floor, f"{e.guaranteed} answers under the guarantee"),
    )
    checks = [
        Check(SECTION, n, v * 100, math.nan, math.nan, unit, f">= {x * 100:g}%", v >= x, d)
        for (n, unit, x), (v, d) in zip(names, figures, strict=True)
    ]
    x = e.provable_cost_ratio
    checks.append(
        Check(
            SECTION,
            "explicit floors: cost on provable requests vs the cheapest provable pair",
            x,
            1.0,
            x,
            "x",
            f"<= {t.EDGE_COST_VS_PROVABLE:g}x",
            x <= t.EDGE_COST_VS_PROVABLE,
            f"whole trace {e.cost_usd_per_1k:.4f} $/1k req vs the truth oracle's "
            f"{e.oracle_cost_usd_per_1k:.4f}",
        )
    )
    return checks


def floor_checks(r: FloorScenarioResult) -> list[Check]:
    return [
        _slo(r, NO_HEADER, 1.0, t.FLOOR_SLO_1X),
        _slo(r, NO_HEADER, 2.0, t.FLOOR_SLO_2X),
        _floor(r, 1.0),
        _floor(r, 2.0),
        _cost(r),
        _slo(r, HEADER, 1.0, t.FLOOR_SLO_WITH_HEADER),
        _cost(r, UNTIL_DECIDED),
        *_edge(r),
        *_edge_no_header(r),
    ]


def edge_lines(r: FloorScenarioResult) -> list[str]:
    """The explicit-floor trace: what is provable, how each part fared, best effort's
    calibration (docs/benchmarks.md)."""
    e = r.edge
    if e is None:
        return []
    reasons = ", ".join(f"{k} {v * 100:.0f}%" for k, v in e.share_by_reason.items())
    lines = [
        "",
        f"Explicit floors (`X-Min-Accuracy` 1-3 points under some pair's truth, "
        f"`X-Task-Category` sent, {e.requests} requests at 1x on the 100-item table): provable "
        f"share {e.provable_share * 100:.1f}% (some pair's bound meets the floor and its idle "
        f"prediction the budget); SLO attainment {e.slo_attainment * 100:.1f}% overall, "
        f"{e.provable_slo * 100:.1f}% on provable requests, "
        f"{e.unprovable_feasible_slo * 100:.1f}% on the {e.unprovable_feasible} "
        f"truth-feasible unprovable ones; floor attainment {e.guaranteed_floor * 100:.1f}% "
        f"of the {e.guaranteed} answers under the guarantee; cost {e.cost_usd_per_1k:.4f} "
        f"$/1k req vs the truth oracle's {e.oracle_cost_usd_per_1k:.4f} "
        f"({ratio(e.cost_usd_per_1k, e.oracle_cost_usd_per_1k):.2f}x), "
        f"{e.provable_cost_ratio:.2f}x the cheapest provable pair on provable requests. "
        f"Reasons: {reasons}.",
        "",
        f"Best effort's stated chance (`p_meet` in `X-Route-Reason`, {e.best_effort} "
        "answers) against what happened (true floor and budget):",
        "",
        "| stated p_meet | answers | mean stated | observed |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {b.low:.1f}-{b.high:.1f} | {b.requests} | {b.predicted:.2f} | {b.observed:.2f} |"
        for b in e.calibration
    ]
    return lines + _edge_table((e, *r.edge_runs))


def _edge_table(runs: tuple[EdgeOutcome, ...]) -> list[str]:
    """The explicit-floor trace per run: with the category sent, and without it at 1x, 2x."""
    lines = [
        "",
        "The explicit-floor trace per run (provable: under the request's true category):",
        "",
        "| run | load | SLO | on provable | on truth-feasible unprovable | floor under the "
        "guarantee | cost $/1k req | vs truth oracle | vs cheapest provable (provable requests) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    return lines + [
        f"| {e.mode} | {e.load:g}x | {e.slo_attainment * 100:.1f}% | {e.provable_slo * 100:.1f}% "
        f"| {e.unprovable_feasible_slo * 100:.1f}% ({e.unprovable_feasible}) "
        f"| {e.guaranteed_floor * 100:.1f}% ({e.guaranteed}) | {e.cost_usd_per_1k:.4f} "
        f"| {ratio(e.cost_usd_per_1k, e.oracle_cost_usd_per_1k):.2f}x "
        f"| {e.provable_cost_ratio:.2f}x |"
        for e in runs
    ]


def _row(o: TruthOutcome) -> str:
    shares = ", ".join(
        f"{p} {s * 100:.0f}%" for p, s in sorted(o.share_by_pair.items(), key=lambda x: -x[1])
    )
    misses = ", ".join(f"{c} {n}" for c, n in o.floor_misses.items()) or "—"
    return (
        f"| {o.mode} | {o.load:g}x | {o.ok}/{o.requests} | {o.floor_attainment * 100:.1f}% "
        f"| {o.budget_attainment * 100:.1f}% | {o.slo_attainment * 100:.1f}% "
        f"| {o.cost_usd_per_1k:.4f} | {o.classifier_accuracy * 100:.1f}% "
        f"| {o.abstained * 100:.1f}% | {misses} | {shares} |"
    )


def floor_lines(r: FloorScenarioResult) -> list[str]:
    cv = r.classifier_cv_accuracy
    lines = [
        "## 3b. Accuracy floors near the truth, without X-Task-Category (graded by true accuracy)",
        "",
        f"Trace: {r.trace_requests} requests drawn from {r.trace_prompts} held-out and "
        f"hand-written prompts (none is a prompt the profiler asked), seed {r.seed}, "
        f"nominal {r.nominal_rps:g} req/s; floors "
        f"are the policy's ({', '.join(f'{c} {f:.2f}' for c, f in r.floors.items())}), "
        f"routed on the table's bound at {r.floor_confidence:.0%}; profiled on "
        f"{', '.join(f'{c} {n}' for c, n in r.eval_items.items())} eval items; classifier "
        f"trained on the pushed eval prompts, cross-validated accuracy "
        f"{'—' if cv is None else f'{cv * 100:.1f}%'}.",
        "",
        "| run | load | ok | floor attainment | budget attainment | SLO attainment "
        "| cost $/1k req | classifier right | abstained | floor misses | share per pair |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [_row(o) for o in (*r.outcomes, r.oracle)]
    lines += [
        "",
        "Pairs (true accuracy as configured in the simulator; the bound the table routes on; "
        "right/n measured by the profiler):",
        "",
        "| pair | out $/Mtok | category: truth / bound (right/n) |",
        "|---|---|---|",
    ]
    for p in r.pairs:
        cells = ", ".join(
            f"{c} {p.truth.get(c, math.nan):.2f} / {p.bound.get(c, math.nan):.2f} "
            f"({p.measured.get(c, '?')})"
            for c in r.floors
        )
        lines.append(f"| {p.pair} | {p.output_usd_per_mtok:.2f} | {cells} |")
    if r.decided_pairs:
        lines += [
            "",
            "The table profiled with `--until-decided` (the first 100 items per category, then "
            "batches from a larger eval file until no floor is undecided): truth / bound "
            "(right/n):",
            "",
            "| pair | category: truth / bound (right/n) |",
            "|---|---|",
        ]
        for p in r.decided_pairs:
            cells = ", ".join(
                f"{c} {p.truth.get(c, math.nan):.2f} / {p.bound.get(c, math.nan):.2f} "
                f"({p.measured.get(c, '?')})"
                for c in r.floors
            )
            lines.append(f"| {p.pair} | {cells} |")
    if r.provable_oracle:
        lines += [
            "",
            "Cheapest-provable oracle of this trace (per request, the cheapest pair the table "
            "proves for floor and budget under the TRUE category, idle, priced on estimated "
            "tokens as the truth oracle): "
            + "; ".join(
                f"{name} table {cost:.4f} $/1k req = "
                f"{ratio(cost, r.oracle.cost_usd_per_1k):.3f}x the truth oracle "
                f"({unprovable} requests nothing proves)"
                for name, (cost, unprovable) in r.provable_oracle.items()
            )
            + ". No router that keeps the table's guarantee on every request pays less.",
        ]
    for name, rows in r.doubt_mix.items():
        parts = "; ".join(
            f"{plausible} -> {pair} {n} ({cost:.4f} $/1k)" for plausible, pair, n, cost in rows
        )
        lines += [
            "",
            f"Under doubt on the {name} table (a strict idle decision that meets every "
            f"plausible category's floor; plausible -> pair, requests, their share of the "
            f"trace's cost per 1,000 requests): {parts or 'no abstention'}.",
        ]
    lines += edge_lines(r)
    lines += [
        "",
        "- The oracle row: per request, the cheapest pair whose true accuracy meets the floor "
        "and whose unloaded latency fits the budget; its attainment is what no queueing allows.",
        "",
    ]
    return lines
