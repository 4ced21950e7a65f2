"""Plain-text views of tables and history for the CLI and the demo (no colours, fixed columns)."""

from __future__ import annotations

from collections.abc import Sequence

from contracts.routing_table import PairEntry, RoutingTable
from control_plane.store.published_tables import VersionInfo


def _row(entry: PairEntry, table: RoutingTable, width: int) -> str:
    policy = table.policy
    n_in = policy.reference_input_tokens
    model = entry.latency
    baseline = "*" if entry.pair in table.baselines.values() else " "
    accuracy = "".join(
        f"{entry.accuracy[c] * 100:6.1f}" if c in entry.accuracy else "     -"
        for c in table.categories
    )
    return (
        f"{baseline}{entry.pair:<{width}} "
        f"{entry.input_usd_per_mtok:7.3f}/{entry.output_usd_per_mtok:<7.3f}"
        f"{entry.reference_cost_usd * 1000:9.4f} "
        f"{model.ttft_s(n_in, 1) * 1000:7.1f} {model.tpot_s(1) * 1000:6.2f} "
        f"{model.tpot_s(model.max_profiled_load) * 1000:7.2f} "
        f"{entry.sustained_output_tokens_per_s:7.0f}{accuracy}  {entry.precision_rank}"
    )


def render_table(table: RoutingTable) -> str:
    """The table as the operator reads it: cheapest first, baselines starred."""
    policy = table.policy
    width = max(len(e.pair) for e in table.entries)
    q = f"p{round(policy.latency_quantile * 100)}"
    categories = "".join(f"{c[:4]:>6}" for c in table.categories)
    lines = [
        f"routing table v{table.version}  sha256 {table.content_sha256[:12]}  "
        f"created {table.created_at.isoformat(timespec='seconds')}  latency at {q}",
        f" {'pair':<{width}} {'in/out $/Mtok':>15}{'m$ ref':>9} {'TTFT@1':>7} {'TPOT@1':>6} "
        f"{'TPOT@max':>7} {'tok/s':>7}{categories}  rank",
    ]
    lines += [_row(e, table, width) for e in table.entries]
    lines.append(
        f"(m$ ref = milli-USD for {policy.reference_input_tokens} in + "
        f"{policy.reference_output_tokens} out tokens; latencies in ms at load 1 and at the "
        f"highest profiled load, TTFT for {policy.reference_input_tokens} input tokens; "
        "accuracy in %; * = baseline)"
    )
    lines += [f"pruned: {p.pair} (dominated by {p.dominated_by})" for p in table.pruned]
    return "\n".join(lines)


def render_history(current: int | None, versions: Sequence[VersionInfo]) -> str:
    if not versions:
        return "no table published yet"
    lines = [f"{'':2}{'version':>7}  {'sha256':<12}  {'entries':>7}  created"]
    for v in versions:
        mark = "->" if v.version == current else ""
        sha = (v.content_sha256 or "?")[:12]
        lines.append(f"{mark:2}{v.version:>7}  {sha:<12}  {v.entries:>7}  {v.created_at or '?'}")
    return "\n".join(lines)
