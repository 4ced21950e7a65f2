"""Requests in flight per pair and tenant, in this process: what fair shares are judged on
(`decision.fair_share`). Entries go when their count reaches 0, so the map holds only
tenants with requests in flight (at most one entry per request). Event-loop thread only."""

from __future__ import annotations

from collections.abc import Mapping

_NONE: Mapping[str, int] = {}


class TenantLoad:
    """pair -> tenant -> requests in flight."""

    __slots__ = ("_by_pair",)

    def __init__(self) -> None:
        self._by_pair: dict[str, dict[str, int]] = {}

    def at(self, pair: str) -> Mapping[str, int]:
        return self._by_pair.get(pair, _NONE)

    def start(self, pair: str, tenant: str) -> None:
        tenants = self._by_pair.setdefault(pair, {})
        tenants[tenant] = tenants.get(tenant, 0) + 1

    def end(self, pair: str, tenant: str) -> None:
        tenants = self._by_pair.get(pair)
        if tenants is None or tenant not in tenants:
            return
        left = tenants[tenant] - 1
        if left > 0:
            tenants[tenant] = left
            return
        del tenants[tenant]
        if not tenants:
            del self._by_pair[pair]

    def by_pair(self) -> Mapping[str, Mapping[str, int]]:
        """Every pair's tenants in flight (read-only; for one decision)."""
        return self._by_pair
