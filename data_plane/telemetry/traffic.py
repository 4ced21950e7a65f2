"""Requests served per pair and fallbacks since start: plain counters the live state reports.

Written by the serving layer as answers finish, read by `sync/live_state` for operators.
No labels, no locks (event-loop thread only).
"""

from __future__ import annotations


class TrafficStats:
    """Requests served per pair and fallbacks since start (plain counters, no labels)."""

    __slots__ = ("fallbacks", "requests_by_pair")

    def __init__(self) -> None:
        self.requests_by_pair: dict[str, int] = {}
        self.fallbacks = 0

    def served(self, pair: str, fallback: bool) -> None:
        self.requests_by_pair[pair] = self.requests_by_pair.get(pair, 0) + 1
        if fallback:
            self.fallbacks += 1
