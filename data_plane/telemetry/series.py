"""Lock-free counters, gauges and histograms for the event-loop thread, exposed through
prometheus_client.

prometheus_client's metrics take a lock and check their state on every update, and its
histograms walk their buckets in Python: a dozen updates per request cost more than the
routing decision. A data-plane process updates metrics only from its event loop, so these
keep plain numbers (a histogram finds its bucket with `bisect`) and build prometheus_client's
metric families when `/metrics` is scraped: the exposition is byte-for-byte the library's.
`_created` samples are not produced (the data plane disables them anyway).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, Literal, TypeVar

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

Kind = Literal["counter", "gauge", "histogram"]


class CounterChild:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError("counters can only go up")
        self.value += amount


class GaugeChild:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def set(self, value: float) -> None:
        self.value = float(value)

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def dec(self, amount: float = 1.0) -> None:
        self.value -= amount


class HistogramChild:
    """Observation counts per bucket (not cumulative) and their sum."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds  # ends with +inf
        self.counts = [0] * len(bounds)
        self.sum = 0.0

    def observe(self, amount: float) -> None:
        self.sum += amount
        self.counts[bisect_left(self.bounds, amount)] += 1  # first bound >= amount


Child = CounterChild | GaugeChild | HistogramChild
C = TypeVar("C", CounterChild, GaugeChild, HistogramChild)


class Family(Generic[C]):
    """One metric with its label names; `labels(...)` gives the child for a set of values
    (created on first use, then cached). Without label names it is its own single child."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        new: Callable[[], C],
        kind: Kind,
        bounds: tuple[float, ...] = (),
    ) -> None:
        self.name, self.documentation, self.kind = name, documentation, kind
        self.labelnames, self.bounds = tuple(labelnames), bounds
        self._new: Callable[[], C] = new
        self.children: dict[tuple[str, ...], C] = {}
        self._single: C | None = None if self.labelnames else self.labels()

    def labels(self, *values: str, **by_name: str) -> C:
        if by_name:
            values = tuple(by_name[n] for n in self.labelnames)
        child = self.children.get(values)
        if child is None:
            if len(values) != len(self.labelnames):
                raise ValueError(f"{self.name} takes labels {self.labelnames}, got {values}")
            text = tuple(str(v) for v in values)  # the exported values
            child = self.children.get(text) or self._new()
            self.children[text] = self.children[values] = child
        return child

    def _only(self) -> C:
        if self._single is None:
            raise TypeError(f"{self.name} has labels: use labels(...)")
        return self._single

    def inc(self, amount: float = 1.0) -> None:
        child = self._only()
        if isinstance(child, HistogramChild):
            raise TypeError(f"{self.name} is a histogram")
        child.inc(amount)

    def set(self, value: float) -> None:
        child = self._only()
        if not isinstance(child, GaugeChild):
            raise TypeError(f"{self.name} is not a gauge")
        child.set(value)

    def observe(self, amount: float) -> None:
        child = self._only()
        if not isinstance(child, HistogramChild):
            raise TypeError(f"{self.name} is not a histogram")
        child.observe(amount)

    def _children(self) -> Iterator[tuple[list[str], Child]]:
        seen: set[int] = set()
        for values, child in self.children.items():
            if id(child) not in seen:  # each child once (it may sit under two keys)
                seen.add(id(child))
                yield [str(v) for v in values], child

    def metric(self) -> Metric:
        """The prometheus_client family with every child's current values."""
        name, doc, labels = self.name, self.documentation, list(self.labelnames)
        if self.kind == "histogram":
            histogram = HistogramMetricFamily(name, doc, labels=labels)
            for values, child in self._children():
                if isinstance(child, HistogramChild):
                    histogram.add_metric(values, self._buckets(child), child.sum)
            return histogram
        family = (CounterMetricFamily if self.kind == "counter" else GaugeMetricFamily)(
            name, doc, labels=labels
        )
        for values, child in self._children():
            if isinstance(child, CounterChild | GaugeChild):
                family.add_metric(values, child.value)
        return family

    def _buckets(self, child: HistogramChild) -> list[tuple[str, float]]:
        """Cumulative counts per upper bound, as the exposition writes them."""
        total, cumulative = 0, []
        for bound, count in zip(self.bounds, child.counts, strict=True):
            total += count
            le = floatToGoString(bound)  # type: ignore[no-untyped-call]  # untyped upstream
            cumulative.append((le, float(total)))
        return cumulative


class Exposition(Collector):
    """Every family of one registry, collected at scrape time; `before_collect` callbacks
    first (gauges of state kept elsewhere are set then, not on every change)."""

    def __init__(self) -> None:
        self.families: list[Family[Any]] = []
        self.before_collect: list[Callable[[], None]] = []

    def counter(
        self, name: str, documentation: str, labelnames: Sequence[str] = ()
    ) -> Family[CounterChild]:
        family = Family(name, documentation, labelnames, CounterChild, "counter")
        self.families.append(family)
        return family

    def gauge(
        self, name: str, documentation: str, labelnames: Sequence[str] = ()
    ) -> Family[GaugeChild]:
        family = Family(name, documentation, labelnames, GaugeChild, "gauge")
        self.families.append(family)
        return family

    def histogram(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        *,
        buckets: Sequence[float],
    ) -> Family[HistogramChild]:
        bounds = (*sorted(float(b) for b in buckets), float("inf"))
        family = Family(
            name, documentation, labelnames, lambda: HistogramChild(bounds), "histogram", bounds
        )
        self.families.append(family)
        return family

    def collect(self) -> Iterator[Metric]:
        for refresh in self.before_collect:
            refresh()
        for family in self.families:
            yield family.metric()
