"""The Grafana dashboard: well-formed panels, a datasource everywhere, valid PromQL."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.infra.metric_names import (
    DASHBOARDS_DIR,
    base_metric_name,
    dashboard_expressions,
    promql_names,
    rule_groups,
)

DASHBOARD = DASHBOARDS_DIR / "gearbox.json"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# Grafana's variables, replaced by what Grafana would send so promtool can parse the query.
GRAFANA_VARS = {"$__range": "1h", "$pair": "a@b", "$category": "chat"}


def _dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def _panels() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for panel in _dashboard()["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))
    return out


def _content_panels() -> list[dict[str, Any]]:
    return [p for p in _panels() if p["type"] != "row"]


def test_dashboard_identity() -> None:
    dashboard = _dashboard()
    assert dashboard["uid"] == "gearbox-overview"
    assert dashboard["title"]
    assert isinstance(dashboard["schemaVersion"], int)
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"


def test_panel_ids_are_unique() -> None:
    ids = [p["id"] for p in _panels()]
    assert len(ids) == len(set(ids))


def test_every_panel_has_the_datasource_and_targets() -> None:
    panels = _content_panels()
    assert len(panels) >= 20
    for panel in panels:
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], panel["title"]
        assert panel["title"], panel["id"]
        assert panel.get("description"), panel["title"]
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]
            assert target["expr"].strip(), panel["title"]


def test_panels_fit_the_grid_without_overlapping() -> None:
    cells: dict[tuple[int, int], str] = {}
    for panel in _panels():
        pos = panel["gridPos"]
        assert pos["x"] >= 0, panel["title"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps {cells.get((x, y))}"
                cells[(x, y)] = panel["title"]


@pytest.mark.parametrize(
    "metric",
    [
        "gearbox_routing_decisions_total",  # traffic share per pair
        "gearbox_budget_outcomes_total",  # attainment
        "gearbox_pair_latency_seconds",  # latency per pair ...
        "gearbox_predicted_latency_seconds",  # ... vs predicted
        "gearbox_cost_usd_total",  # cost
        "gearbox_baseline_cost_usd_total",  # cost saved
        "gearbox_fallbacks_total",
        "gearbox_circuit_state",  # breaker state
        "gearbox_routing_table_version",
        "gearbox_routing_table_created_timestamp_seconds",  # table age
        "gearbox_routing_decision_duration_seconds",  # router overhead
        "gearbox_complexity_score",  # classifier complexity per category
        "gearbox_cp_latency_drift_ratio",  # observed vs predicted, as the refit loop sees it
        "gearbox_cp_refit_checks_total",  # refit and demotion history
        "gearbox_cp_live_agreement_ratio",  # live agreement ...
        "gearbox_cp_expected_agreement_ratio",  # ... vs the profile
        "gearbox_accuracy_check_cost_usd_total",  # what the re-asks cost
        "gearbox_tenant_shed_total",  # admission: shed share per priority class
        "gearbox_tenant_requests_total",  # traffic per tenant
        "gearbox_tenant_budget_outcomes_total",  # attainment per tenant
        "gearbox_tenant_cost_usd_total",  # cost per tenant
        "gearbox_flow_queue_length",  # flow control: requests waiting per band
        "gearbox_flow_queue_wait_seconds",  # how long they waited
        "gearbox_flow_queued_total",  # who had to wait
        "gearbox_flow_dispatched_total",  # waiting requests dispatched
        "gearbox_flow_refused_total",  # and refused
    ],
)
def test_dashboard_covers_the_operator_questions(metric: str) -> None:
    # Directly, or through the recording rules a panel uses (followed transitively).
    assert metric in _metrics_behind_dashboard()


def test_queue_refusals_are_shown_by_reason_and_band() -> None:
    """docs/runbooks.md tells operators to read a refusal's reason off the dashboard: some
    panel splits gearbox_flow_refused_total by both labels."""
    exprs = [
        t["expr"] for p in _content_panels() for t in p["targets"]
        if "gearbox_flow_refused_total" in t["expr"]
    ]  # fmt: skip
    assert any("reason" in e and "priority" in e for e in exprs)


def _metrics_behind_dashboard() -> set[str]:
    rules = {
        str(r["record"]): str(r["expr"]) for g in rule_groups() for r in g["rules"] if "record" in r
    }
    todo = [n for e in dashboard_expressions() for n in promql_names(e)]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += promql_names(rules.get(name, ""))
    return {base_metric_name(n) for n in seen if ":" not in n}


def test_every_dashboard_query_is_valid_promql(promtool: str, tmp_path: Path) -> None:
    exprs = dashboard_expressions()
    assert len(exprs) >= 30
    rules = []
    for i, expr in enumerate(exprs):
        if expr.startswith("label_values("):
            continue  # a Grafana function, not PromQL
        for var, value in GRAFANA_VARS.items():
            expr = expr.replace(var, value)
        assert "$" not in expr, f"unknown Grafana variable in {expr!r}"
        rules.append({"record": f"dashboard:query_{i}:check", "expr": expr})
    path = tmp_path / "dashboard.rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = subprocess.run(
        [promtool, "check", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
