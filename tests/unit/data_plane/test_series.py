"""series.py: the lock-free metrics expose exactly what prometheus_client's own would."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from data_plane.telemetry.series import Exposition

BUCKETS = (1e-05, 0.005, 0.25, 1, 2.5, 300)


def _without_created(registry: CollectorRegistry) -> list[str]:
    """The exposition lines, less `_created` samples (prometheus_client's extra)."""
    lines = generate_latest(registry).decode().splitlines()
    return [line for line in lines if "_created" not in line]


def _drive(counter: Any, hist: Any, single: Any, gauge: Any, version: Any) -> None:
    """The same updates on ours or prometheus_client's (both have this interface)."""
    counter.labels("chat", "ok").inc()
    counter.labels(route="chat", outcome="ok").inc(2.5)
    counter.labels("route", "error")
    for value in (0.0, 1e-05, 0.004, 0.25, 7.0, 300.0, 301.0):
        hist.labels("a@b").observe(value)
        single.observe(value / 10)
    gauge.labels("e#0").set(3)
    gauge.labels("e#1").inc(2)
    gauge.labels("e#1").dec()
    version.set(12)


def test_the_exposition_is_prometheus_clients() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    x = Exposition()
    ours.register(x)
    counters = (
        x.counter("gearbox_requests_total", "Requests", ["route", "outcome"]),
        Counter("gearbox_requests_total", "Requests", ["route", "outcome"], registry=theirs),
    )
    hists = (
        x.histogram("gearbox_latency_seconds", "Latency", ["pair"], buckets=BUCKETS),
        Histogram("gearbox_latency_seconds", "Latency", ["pair"], buckets=BUCKETS, registry=theirs),
    )
    plain = (
        x.histogram("gearbox_decision_seconds", "Decision", buckets=BUCKETS),
        Histogram("gearbox_decision_seconds", "Decision", buckets=BUCKETS, registry=theirs),
    )
    gauges = (
        x.gauge("gearbox_in_flight", "In flight", ["endpoint"]),
        Gauge("gearbox_in_flight", "In flight", ["endpoint"], registry=theirs),
    )
    versions = (x.gauge("gearbox_version", "V"), Gauge("gearbox_version", "V", registry=theirs))
    for metrics in zip(counters, hists, plain, gauges, versions, strict=True):
        _drive(*metrics)
    assert _without_created(ours) == _without_created(theirs)
    assert (
        ours.get_sample_value("gearbox_requests_total", {"route": "chat", "outcome": "ok"}) == 3.5
    )


def test_misuse_fails_as_prometheus_client_does() -> None:
    x = Exposition()
    counter = x.counter("gearbox_c_total", "C", ["a"])
    with pytest.raises(ValueError, match="takes labels"):
        counter.labels("x", "y")
    with pytest.raises(ValueError, match="only go up"):
        counter.labels("x").inc(-1)
    with pytest.raises(TypeError, match="labels"):
        counter.inc()
    with pytest.raises(TypeError, match="not a histogram"):
        x.gauge("gearbox_g", "G").observe(1.0)
    with pytest.raises(TypeError, match="not a gauge"):
        x.counter("gearbox_d_total", "D").set(1.0)
    with pytest.raises(TypeError, match="is a histogram"):
        x.histogram("gearbox_h", "H", buckets=(1,)).inc()
