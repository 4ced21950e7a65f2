"""The closed-loop view's pure parts: refit provenance rows and an empty view."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from contracts.policy import Policy
from control_plane.operator_loop import loop_view, refit_row

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
