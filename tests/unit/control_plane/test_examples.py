"""The example fleet builds into the table the README tour describes."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from control_plane.build.documents import load_policy_file, load_report_file
from control_plane.build.table import build

EIGHT_B, SEVENTY_B = "llama-3.1-8b-instruct", "llama-3.1-70b-instruct"


def test_example_fleet_table() -> None:
    reports = [load_report_file(p) for p in sorted(Path("examples/profiles").glob("*.json"))]
    made = build(reports, load_policy_file(Path("examples/policy.yaml")), datetime.now(UTC))
    table = made.table
    assert made.warnings == ()
    assert [(p.pair, p.dominated_by) for p in table.pruned] == [
        (f"{EIGHT_B}@int8-w8a8", f"{EIGHT_B}@fp8")
    ]
    assert table.baselines == {EIGHT_B: f"{EIGHT_B}@fp16", SEVENTY_B: f"{SEVENTY_B}@fp8"}
    assert table.entries[0].pair == f"{EIGHT_B}@fp8"  # the cheapest
    awq = table.entry(f"{EIGHT_B}@awq-int4")
    fp8 = table.entry(f"{EIGHT_B}@fp8")
    assert awq is not None
    assert fp8 is not None
    # awq-int4 stays because it decodes fastest at low load, though it costs more.
    assert awq.latency.tpot_s(1) < fp8.latency.tpot_s(1)
    assert all(e.price_source == "derived" for e in table.entries)
