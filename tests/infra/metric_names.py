"""Metric names the infra files use, and the names docs/METRICS.md promises.

Pure readers over the repository's files (and over a Prometheus text exposition, so a test can
later scrape the running processes and compare). They never start or contact anything.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

REPO_ROOT = Path(__file__).resolve().parents[2]
METRICS_DOC = REPO_ROOT / "docs" / "METRICS.md"
RULES_DIR = REPO_ROOT / "infra" / "prometheus" / "rules"
DASHBOARDS_DIR = REPO_ROOT / "infra" / "grafana" / "dashboards"

PREFIX = "gearbox_"
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
# Strings, range/subquery selectors and comments carry no metric names (and `[2m:30s]` would
# otherwise look like a recording-rule name).
_NOT_NAMES = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`|\[[^\]]*\]|#[^\n]*')
_IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_DOC_ROW = re.compile(r"^\|\s*(gearbox_[a-z0-9_]+)\s*\|\s*([^|]+?)\s*\|")


def documented_metrics(doc: Path = METRICS_DOC) -> dict[str, str]:
    """Metric name -> type word (`counter`, `gauge`, `histogram`) from the METRICS.md tables."""
    found: dict[str, str] = {}
    for line in doc.read_text(encoding="utf-8").splitlines():
        match = _DOC_ROW.match(line)
        if match:
            found[match.group(1)] = match.group(2).split()[0]
    return found


def promql_names(expr: str) -> set[str]:
    """Every series name an expression selects: plain metrics and recording-rule names."""
    bare = _NOT_NAMES.sub(" ", expr)
    return {
        token
        for token in _IDENTIFIER.findall(bare)
        if token.startswith(PREFIX) or (":" in token and PREFIX in token)
    }


def base_metric_name(name: str) -> str:
    """`x_bucket` / `x_sum` / `x_count` -> `x` (the histogram's documented name)."""
    for suffix in HISTOGRAM_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def rule_groups(rules_dir: Path = RULES_DIR) -> Iterator[dict[str, Any]]:
    """Every rule group of every rule file, in file order."""
    for path in sorted(rules_dir.glob("*.rules.yml")):
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
        yield from document["groups"]


def rule_expressions(rules_dir: Path = RULES_DIR) -> list[str]:
    """The `expr` of every recording and alerting rule."""
    return [str(rule["expr"]) for group in rule_groups(rules_dir) for rule in group["rules"]]


def recorded_names(rules_dir: Path = RULES_DIR) -> set[str]:
    """Names the recording rules define (`level:metric:operations`)."""
    return {
        str(rule["record"])
        for group in rule_groups(rules_dir)
        for rule in group["rules"]
        if "record" in rule
    }


def _walk_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _walk_panels(panel.get("panels", []))


def dashboard_expressions(dashboards_dir: Path = DASHBOARDS_DIR) -> list[str]:
    """PromQL of every panel target, template variable query and annotation query."""
    exprs: list[str] = []
    for path in sorted(dashboards_dir.glob("*.json")):
        dashboard = json.loads(path.read_text(encoding="utf-8"))
        for panel in _walk_panels(dashboard.get("panels", [])):
            exprs += [str(t["expr"]) for t in panel.get("targets", []) if "expr" in t]
        for variable in dashboard.get("templating", {}).get("list", []):
            query = variable.get("query")
            if variable.get("type") == "query":
                exprs.append(str(query["query"] if isinstance(query, dict) else query))
        exprs += [
            str(a["expr"]) for a in dashboard.get("annotations", {}).get("list", []) if "expr" in a
        ]
    return exprs


def infra_expressions() -> list[str]:
    """Every PromQL expression in infra/prometheus and infra/grafana."""
    return rule_expressions() + dashboard_expressions()


def metric_names_in_infra() -> set[str]:
    """Exported metric names (histogram suffixes stripped) the rules and dashboards rely on.

    Recording-rule names (with colons) are left out: they are produced by the rules themselves.
    """
    names: set[str] = set()
    for expr in infra_expressions():
        names |= {base_metric_name(n) for n in promql_names(expr) if ":" not in n}
    return names


def exported_metric_names(exposition: str) -> set[str]:
    """Metric names in a Prometheus text exposition, spelled as METRICS.md spells them.

    The parser strips `_total` from counter families; it is put back so the result compares
    directly with `documented_metrics()` and `metric_names_in_infra()`. The `x_created`
    gauges prometheus_client adds beside counters and histograms are not metrics of their own.
    """
    families = {f.name: f.type for f in text_string_to_metric_families(exposition)}
    names: set[str] = set()
    for name, kind in families.items():
        stem = name.removesuffix("_created")
        if stem != name and families.get(stem) in {"counter", "histogram", "summary"}:
            continue
        names.add(f"{name}_total" if kind == "counter" else name)
    return names
