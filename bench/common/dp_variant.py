"""The data plane with one hand-written piece swapped for the library it replaces, for the
overhead section's A/B rows (docs/benchmarks.md): same settings, same table, same load.

`python -m bench.common.dp_variant sdk-spans --otlp-url URL serve`: spans go through the SDK's
BatchSpanProcessor and OTLP/HTTP exporter (default sampling) instead of `telemetry/otlp.py`.
`python -m bench.common.dp_variant plain-metrics serve`: metrics are plain prometheus_client objects
instead of `telemetry/series.py`'s. (The upstream client needs no variant: it is a setting,
GEARBOX_DP_UPSTREAM_CLIENT=aiohttp.)
"""

from __future__ import annotations

import argparse
import sys
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

VARIANTS = ("sdk-spans", "plain-metrics")


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
    return AppDeps(metrics=DataPlaneMetrics("bench", "bench", PlainExposition()))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.common.dp_variant", description=__doc__)
    parser.add_argument("variant", choices=VARIANTS)
    parser.add_argument("--otlp-url")
    args, rest = parser.parse_known_args(argv)
    return serve(rest, variant_deps(args.variant, args.otlp_url))


if __name__ == "__main__":
    sys.exit(main())
