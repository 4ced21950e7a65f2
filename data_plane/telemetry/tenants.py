"""Bounded tenant labels: the tenants with the most traffic keep their own metric label, every
other tenant shares `other`, so a client naming a new tenant per request cannot grow the
series without bound (docs/METRICS.md, "Tenants and priorities").

Traffic is counted with the space-saving sketch over `4 x top_n` tenants (a tenant sending
more than 1/(4 x top_n) of the requests is always tracked; the count of one just admitted is
an overestimate by at most the smallest count it replaced). At most `top_n` tenants hold a
label at a time; an unlabelled tenant whose count passes the smallest labelled count takes
that label's place. At most `2 x top_n` tenants are ever labelled in one process (a label
once issued stays a series until restart), so a rotating top cannot grow the series either.
"""

from __future__ import annotations

OTHER = "other"


class TenantLabels:
    """tenant -> the label its metrics carry; counts one request per `label` call."""

    __slots__ = ("_capacity", "_counts", "_issued", "_labelled", "_max_issued", "_top_n")

    def __init__(self, top_n: int) -> None:
        self._top_n = top_n
        self._capacity = 4 * top_n
        self._max_issued = 2 * top_n
        self._counts: dict[str, int] = {}
        self._labelled: set[str] = set()
        self._issued: set[str] = set()

    def label(self, tenant: str) -> str:
        """Count one request of `tenant`; its label now (the tenant, or `other`)."""
        count = self._count(tenant)
        if tenant in self._labelled:
            return tenant
        if tenant not in self._issued and len(self._issued) >= self._max_issued:
            return OTHER
        if len(self._labelled) < self._top_n:
            self._grant(tenant)
            return tenant
        weakest = min(self._labelled, key=lambda t: self._counts.get(t, 0))
        if count > self._counts.get(weakest, 0):
            self._labelled.discard(weakest)
            self._grant(tenant)
            return tenant
        return OTHER

    def labelled(self) -> frozenset[str]:
        """The tenants holding their own label now."""
        return frozenset(self._labelled)

    def _grant(self, tenant: str) -> None:
        self._labelled.add(tenant)
        self._issued.add(tenant)

    def _count(self, tenant: str) -> int:
        counts = self._counts
        count = counts.get(tenant)
        if count is None:
            if len(counts) < self._capacity:
                count = 0
            else:  # space saving: the newcomer inherits the smallest count it evicts
                evicted = min(counts, key=counts.__getitem__)
                count = counts.pop(evicted)
        counts[tenant] = count = count + 1
        return count
