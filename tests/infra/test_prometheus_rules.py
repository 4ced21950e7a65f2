"""Prometheus rules: promtool check + unit tests, alert annotations, runbook links, naming."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.infra.metric_names import PREFIX, RULES_DIR, rule_groups

REPO_ROOT = RULES_DIR.parents[2]
TESTS_DIR = REPO_ROOT / "infra" / "prometheus" / "tests"
RUNBOOKS = REPO_ROOT / "docs" / "runbooks.md"
RUNBOOK_BASE = "https://github.com/gearbox-router/gearbox/blob/main/docs/runbooks.md#"
RECORD_NAME = re.compile(r"^[a-z_]+:" + PREFIX + r"[a-z0-9_]+:[a-z0-9_]+$")


def _rule_files() -> list[Path]:
    return sorted(RULES_DIR.glob("*.rules.yml"))


def _test_files() -> list[Path]:
    return sorted(TESTS_DIR.glob("*.test.yml"))


def _alerts() -> list[dict[str, Any]]:
    return [r for g in rule_groups(RULES_DIR) for r in g["rules"] if "alert" in r]


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)


def _github_anchor(heading: str) -> str:
    """GitHub's heading slug: lower case, punctuation dropped, spaces to dashes."""
    slug = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return slug.replace(" ", "-")


def test_rule_and_test_files_exist() -> None:
    assert len(_rule_files()) == 2
    assert len(_test_files()) >= 4


def test_promtool_check_rules_accepts_every_rule_file(promtool: str) -> None:
    result = _run([promtool, "check", "rules", *map(str, _rule_files())])
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") == len(_rule_files())


def test_promtool_unit_tests_pass(promtool: str) -> None:
    result = _run([promtool, "test", "rules", *map(str, _test_files())])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "FAILED" not in result.stdout + result.stderr


def test_promtool_rejects_a_broken_rule(promtool: str, tmp_path: Path) -> None:
    # The check above is only worth something if promtool fails on bad input.
    bad = tmp_path / "bad.rules.yml"
    bad.write_text(
        yaml.safe_dump({"groups": [{"name": "g", "rules": [{"alert": "X", "expr": "sum(("}]}]})
    )
    assert _run([promtool, "check", "rules", str(bad)]).returncode != 0


def test_every_alert_has_a_firing_and_a_quiet_unit_test() -> None:
    firing: set[str] = set()
    quiet: set[str] = set()
    for path in _test_files():
        for case in yaml.safe_load(path.read_text())["tests"]:
            for check in case.get("alert_rule_test", []):
                (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    names = {a["alert"] for a in _alerts()}
    assert names - firing == set(), "alerts without a firing test"
    assert names - quiet == set(), "alerts without a non-firing test"
    assert (firing | quiet) - names == set(), "tests for alerts that do not exist"


def test_alert_names_are_unique() -> None:
    names = [a["alert"] for a in _alerts()]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("alert", _alerts(), ids=lambda a: str(a["alert"]))
def test_alert_has_summary_description_severity_and_runbook(alert: dict[str, Any]) -> None:
    annotations = alert["annotations"]
    assert annotations["summary"].strip()
    assert len(annotations["description"]) > len(annotations["summary"])
    assert alert["labels"]["severity"] in {"warning", "critical"}
    assert annotations["runbook_url"] == RUNBOOK_BASE + alert["alert"].lower()
    assert "for" in alert, "every alert waits before firing"


def test_every_runbook_url_points_at_a_runbook_section() -> None:
    headings = re.findall(r"^## (.+)$", RUNBOOKS.read_text(), flags=re.MULTILINE)
    anchors = {_github_anchor(h) for h in headings}
    for alert in _alerts():
        anchor = alert["annotations"]["runbook_url"].split("#", 1)[1]
        assert anchor in anchors, f"docs/runbooks.md has no section for {alert['alert']}"
    alert_names = {a["alert"] for a in _alerts()}
    assert set(headings) == alert_names, "runbook sections without an alert"


@pytest.mark.parametrize("section", ["**Means.**", "**First checks.**", "**Mitigate.**"])
def test_every_runbook_section_explains_meaning_checks_and_mitigation(section: str) -> None:
    bodies = re.split(r"^## .+$", RUNBOOKS.read_text(), flags=re.MULTILINE)[1:]
    assert len(bodies) == len(_alerts())
    assert all(section in body for body in bodies)


def test_recording_rules_follow_level_metric_operations() -> None:
    records = [r["record"] for g in rule_groups(RULES_DIR) for r in g["rules"] if "record" in r]
    assert records, "no recording rules found"
    bad = [r for r in records if not RECORD_NAME.match(r)]
    assert bad == []
    assert len(records) == len(set(records))
