"""Markdown for the routing-quality section of RESULTS.md."""

from __future__ import annotations

from bench.quality.results import QualityResult


def quality_lines(q: QualityResult) -> list[str]:
    lines = [
        "## 3. Routing quality (simulated fleet, profiled by the profiler, replayed open loop)",
        "",
        f"Trace: {q.trace_requests} requests, seed {q.seed}, nominal {q.nominal_rps:g} req/s. "
        f"Most precise pair: `{q.most_precise_pair}`; cheapest: `{q.cheapest_pair}`.",
        "",
        "| policy | load | req/s | ok | cost $/1k req | budget attainment | p50 ms | p99 ms "
        "| floors met | client stall ms | share per pair |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for o in q.outcomes:
        shares = ", ".join(
            f"{p} {s * 100:.0f}%" for p, s in sorted(o.share_by_pair.items(), key=lambda x: -x[1])
        )
        lines.append(
            f"| {o.policy} | {o.load:g}x | {o.rate_rps:g} | {o.ok}/{o.requests} "
            f"| {o.cost_usd_per_1k:.4f} | {o.budget_attainment * 100:.1f}% "
            f"| {o.p50_latency_ms:.0f} | {o.p99_latency_ms:.0f} "
            f"| {'yes' if o.floors_met else 'NO'} | {o.client_max_lag_ms:.0f} | {shares} |"
        )
    lines += [
        "",
        "Accuracy per category (measured by grading the answers; `floor: acc (n)` per floor "
        "group, `!` = significantly below the floor):",
        "",
        "| policy | load | " + " | ".join(c.category for c in q.outcomes[0].categories) + " |"
        if q.outcomes
        else "",
        "|---|---|" + "---|" * (len(q.outcomes[0].categories) if q.outcomes else 0),
    ]
    for o in q.outcomes:
        cells = []
        for c in o.categories:
            groups = " ".join(
                f"{g.floor:.2f}:{g.accuracy:.2f}({g.requests}){'' if g.met else '!'}"
                for g in c.groups
            )
            cells.append(f"{c.accuracy:.3f} [{groups}]")
        lines.append(f"| {o.policy} | {o.load:g}x | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Pairs (prices from the table; accuracy profiled vs configured in the simulator):",
    ]
    lines += ["", "| pair | in $/Mtok | out $/Mtok | profiled accuracy | simulated accuracy |"]
    lines += ["|---|---|---|---|---|"]
    for p in q.pairs:
        prof = ", ".join(f"{k} {v:.2f}" for k, v in sorted(p.profiled_accuracy.items()))
        sim = ", ".join(f"{k} {v:.2f}" for k, v in sorted(p.simulated_accuracy.items()))
        lines.append(
            f"| {p.pair} | {p.input_usd_per_mtok:.4f} | {p.output_usd_per_mtok:.4f} "
            f"| {prof} | {sim} |"
        )
    if q.loop:
        lines += [
            "",
            "Latency refit loop on a fleet whose engines never change (gearbox policy):",
            "",
            "| load | requests | budget attainment, loop off | loop on | refits published |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {r.load:g}x | {r.requests} | {r.attainment_off * 100:.1f}% "
            f"| {r.attainment_on * 100:.1f}% | {r.refits} |"
            for r in q.loop
        ]
    lines += [""] + [f"- {n}" for n in q.notes] + [""]
    return lines
