"""The data plane with one hand-written piece swapped for the library it replaces, for the
overhead section's A/B rows (docs/benchmarks.md): same settings, same table, same load.

`python -m bench.common.dp_variant sdk-spans --otlp-url URL serve`: spans go through the SDK's
BatchSpanProcessor and OTLP/HTTP exporter (default sampling) instead of `telemetry/otlp.py`.
`python -m bench.common.dp_variant plain-metrics serve`: metrics are plain prometheus_client objects
instead of `telemetry/series.py`'s. (The upstream client needs no variant: it is a setting,
GEARBOX_DP_UPSTREAM_CLIENT=aiohttp.)
`python -m bench.common.dp_variant slowed serve`: the data plane as built, plus a SLOWED_US busy
loop on the event loop per routed request (in the metrics' `count_decision`, called once per
decision), for the CI overhead gate's check that it fails on a slowed data plane
(`bench/overhead/gate.py --slowed`). Nothing in the data plane's code changes.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any, cast

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.core import Metric
from prometheus_client.metrics import MetricWrapperBase

from data_plane.__main__ import main as serve
from data_plane.app import AppDeps
from data_plane.telemetry.metrics import DataPlaneMetrics
from data_plane.telemetry.series import CounterChild, Exposition, Family, GaugeChild, HistogramChild

VARIANTS = ("sdk-spans", "plain-metrics", "slowed")
SLOWED_US = 300  # the `slowed` variant's busy loop per routed request


class SlowedMetrics(DataPlaneMetrics):
    """The data plane's own metrics, spending `busy_us` of CPU on the event loop each time a
    decision is counted (once per routed request)."""

    def __init__(self, busy_us: int = SLOWED_US) -> None:
        super().__init__("bench", "bench")
        self.busy_ns = busy_us * 1000

    def count_decision(self, pair: str, reason: str, category: str, complexity: float) -> None:
        until = time.perf_counter_ns() + self.busy_ns
        while time.perf_counter_ns() < until:
            pass
        super().count_decision(pair, reason, category, complexity)


class PlainExposition(Exposition):
    """Builds prometheus_client's own Counter, Gauge and Histogram (locks, per-bucket Python
    loops and all) where `series` builds its lock-free children; same names, same labels."""

    def __init__(self) -> None:
        super().__init__()
        self.metrics: list[MetricWrapperBase] = []

    def _keep(self, metric: MetricWrapperBase) -> Any:
        self.metrics.append(metric)
        return metric

    def counter(
        self, name: str, documentation: str, labelnames: Sequence[str] = ()
    ) -> Family[CounterChild]:
        made = Counter(name, documentation, labelnames, registry=None)
        return cast(Family[CounterChild], self._keep(made))

    def gauge(
        self, name: str, documentation: str, labelnames: Sequence[str] = ()
    ) -> Family[GaugeChild]:
        made = Gauge(name, documentation, labelnames, registry=None)
        return cast(Family[GaugeChild], self._keep(made))

    def histogram(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        *,
        buckets: Sequence[float],
    ) -> Family[HistogramChild]:
        made = Histogram(name, documentation, labelnames, buckets=buckets, registry=None)
        return cast(Family[HistogramChild], self._keep(made))

    def collect(self) -> Iterator[Metric]:
        for refresh in self.before_collect:
            refresh()
        for metric in self.metrics:
            yield from metric.collect()


def variant_deps(variant: str, otlp_url: str | None) -> AppDeps:
    if variant == "sdk-spans":
        if not otlp_url:
            raise SystemExit("sdk-spans needs --otlp-url")
        return AppDeps(span_processor=BatchSpanProcessor(OTLPSpanExporter(endpoint=otlp_url)))
    if variant == "slowed":
        return AppDeps(metrics=SlowedMetrics())
    return AppDeps(metrics=DataPlaneMetrics("bench", "bench", PlainExposition()))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.common.dp_variant", description=__doc__)
    parser.add_argument("variant", choices=VARIANTS)
    parser.add_argument("--otlp-url")
    args, rest = parser.parse_known_args(argv)
    return serve(rest, variant_deps(args.variant, args.otlp_url))


if __name__ == "__main__":
    sys.exit(main())
