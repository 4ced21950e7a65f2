"""The closed-loop view's pure parts: refit provenance rows and an empty view."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from contracts.policy import Policy
from control_plane.ui.loop import loop_view, refit_row

PROVENANCE = {
    "note": "refit from live traffic: 250 samples over 10 minutes",
    "base_version": 3,
    "samples": 250,
    "window_s": 600.0,
    "pairs": {
        "f@q": {"samples": 250, "observed_e2e_ratio": 2.0, "ttft_factor": 1.8, "tpot_factor": 1.6}
    },
    "demoted": {"f@q": {"chat": 0.5}},
}


def test_a_refit_table_gives_a_row() -> None:
    raw = json.dumps({"created_at": "2026-11-25T12:00:00Z", "refit": PROVENANCE})
    row = refit_row(4, raw)
    assert row is not None
    assert (row.version, row.base_version, row.samples) == (4, 3, 250)
    assert row.factors == {"f@q": (1.8, 1.6)}
    assert row.demoted == {"f@q": {"chat": 0.5}}
    assert row.created_at == "2026-11-25T12:00:00Z"


def test_plain_builds_and_unreadable_documents_give_none() -> None:
    assert refit_row(1, json.dumps({"refit": None})) is None
    assert refit_row(1, None) is None
    assert refit_row(1, b"not json") is None
    assert refit_row(1, json.dumps({"refit": {"note": "x"}})) is None  # invalid provenance


def test_no_table_means_no_figures() -> None:
    policy = Policy()
    view = loop_view(None, policy, [], [], datetime(2026, 1, 1, tzinfo=UTC))
    assert (view.table_version, view.drift, view.agreement, view.reports) == (None, [], [], 0)
    assert view.window_s == policy.refit.window_s


def test_a_demotion_in_force_is_listed_with_what_floors_compare_with() -> None:
    from datetime import UTC, datetime

    from contracts.latency_feedback import AgreementCell, LatencyFeedback
    from contracts.routing_table import with_version
    from control_plane.build.table import build_table
    from control_plane.loop.accuracy_drift import merge_agreement, plan_demotions
    from control_plane.loop.demotion import apply_demotions
    from control_plane.ui.loop import demotion_rows
    from tests.unit.control_plane.factories import make_report

    now = datetime(2026, 1, 1, tzinfo=UTC)
    reports = [
        make_report("fam", "fp16", accuracy={"math": 0.95}),
        make_report("fam", "awq-int4", accuracy={"math": 0.9}),
    ]
    table = with_version(build_table(reports, Policy(), now, prune=False), 3)
    cell = AgreementCell(pair="fam@awq-int4", category="math", checks=400, agreed=260)
    feedback = LatencyFeedback(
        instance="dp", table_version=3, window_start=now, window_end=now, agreement=(cell,)
    )
    plan = plan_demotions(merge_agreement([feedback], table, 0.99), Policy().accuracy_check)
    demoted = with_version(apply_demotions(table, plan, 600.0, now), 4)
    (row,) = demotion_rows(demoted)
    entry = demoted.entry("fam@awq-int4")
    assert entry is not None
    assert (row.pair, row.category, row.checks, row.agreed, row.base_version) == (
        "fam@awq-int4", "math", 400, 260, 3,
    )  # fmt: skip
    assert row.bound == entry.accuracy_bound["math"] < row.profile_bound
    assert demotion_rows(table) == []
    view = loop_view(demoted, Policy(), [], [], now)
    assert view.demotions == [row]
