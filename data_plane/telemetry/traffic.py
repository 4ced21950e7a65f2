"""Requests served per pair and fallbacks since start: plain counters the live state reports.

Written by the serving layer as answers finish, read by `sync/live_state` for operators.
No labels, no locks (event-loop thread only). `pair()` holds the per-pair counters the
operator page shows (`pair_totals.PairTotals`).
"""

from __future__ import annotations

from data_plane.telemetry.pair_totals import PairTotals


class TrafficStats:
    """Requests served per pair and fallbacks since start (plain counters, no labels)."""

    __slots__ = ("fallbacks", "pairs", "requests_by_pair")

    def __init__(self) -> None:
        self.requests_by_pair: dict[str, int] = {}
        self.fallbacks = 0
        self.pairs: dict[str, PairTotals] = {}

    def served(self, pair: str, fallback: bool) -> None:
        self.requests_by_pair[pair] = self.requests_by_pair.get(pair, 0) + 1
        if fallback:
            self.fallbacks += 1

    def pair(self, pair: str, family: str) -> PairTotals:
        """`pair`'s counters (created on first use; bounded by the pairs of the tables)."""
        totals = self.pairs.get(pair)
        if totals is None:
            totals = self.pairs[pair] = PairTotals(family)
        return totals

    def attempted(self, pair: str, family: str, retry: bool, failed: bool) -> None:
        """One engine attempt on `pair`: a retry when an attempt of the request failed before."""
        totals = self.pair(pair, family)
        totals.retries += retry
        totals.errors += failed
