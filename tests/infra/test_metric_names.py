"""Every metric the rules and the dashboard use is promised by docs/METRICS.md."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from tests.infra.metric_names import (
    base_metric_name,
    documented_metrics,
    exported_metric_names,
    infra_expressions,
    metric_names_in_infra,
    promql_names,
    recorded_names,
)


def test_metrics_doc_parses_into_names_and_types() -> None:
    documented = documented_metrics()
    assert documented["gearbox_routing_decisions_total"] == "counter"
    assert documented["gearbox_pair_latency_seconds"] == "histogram"
    assert documented["gearbox_cp_redis_up"] == "gauge"
    assert len(documented) >= 30


def test_infra_uses_only_documented_metrics() -> None:
    used = metric_names_in_infra()
    assert len(used) >= 20, "the parser found suspiciously few metric names"
    assert used - set(documented_metrics()) == set()


def test_histogram_suffixes_only_on_histograms() -> None:
    documented = documented_metrics()
    for expr in infra_expressions():
        for name in promql_names(expr):
            base = base_metric_name(name)
            if base != name and ":" not in name:
                assert documented.get(base) == "histogram", f"{name} in {expr!r}"


def test_every_recording_rule_name_used_is_defined() -> None:
    used = {n for expr in infra_expressions() for n in promql_names(expr) if ":" in n}
    assert used, "no recording rules are used at all"
    assert used - recorded_names() == set()


def test_promql_names_skips_strings_ranges_and_label_names() -> None:
    expr = (
        'sum by (pair) (rate(gearbox_a_total{pair=~"gearbox_not_a_metric"}[5m:30s]))'
        " / on (pair) pair:gearbox_b:rate5m # gearbox_commented"
    )
    assert promql_names(expr) == {"gearbox_a_total", "pair:gearbox_b:rate5m"}


def test_base_metric_name_strips_histogram_suffixes_only() -> None:
    assert base_metric_name("gearbox_x_seconds_bucket") == "gearbox_x_seconds"
    assert base_metric_name("gearbox_x_seconds_count") == "gearbox_x_seconds"
    assert base_metric_name("gearbox_x_total") == "gearbox_x_total"


def test_exported_metric_names_reads_a_real_exposition() -> None:
    # The hook for scraping the running processes later: names come back spelled as in the docs.
    registry = CollectorRegistry()
    Counter("gearbox_requests", "r", ["route"], registry=registry).labels("chat").inc()
    Histogram("gearbox_pair_latency_seconds", "l", ["pair"], registry=registry).labels("a@b")
    Gauge("gearbox_cp_redis_up", "u", registry=registry).set(1)
    text = generate_latest(registry).decode()
    assert exported_metric_names(text) == {
        "gearbox_requests_total",
        "gearbox_pair_latency_seconds",
        "gearbox_cp_redis_up",
    }
