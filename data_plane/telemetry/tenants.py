"""Bounded tenant labels: the tenants with the most traffic keep their own metric label, every
other tenant shares `other`, so a client naming a new tenant per request cannot grow the
series without bound (docs/METRICS.md, "Tenants and priorities").

Traffic is counted with the space-saving sketch over `4 x top_n` tenants (a tenant sending
more than 1/(4 x top_n) of the requests is always tracked; the count of one just admitted is
an overestimate by at most the smallest count it replaced). At most `top_n` tenants hold a
label at a time; an unlabelled tenant whose count passes the smallest labelled count takes
that label's place. At most `2 x top_n` tenants are ever labelled in one process (a label
once issued stays a series until restart), so a rotating top cannot grow the series either.

A label is the tenant id itself only when it is a short plain name (1-64 letters, digits or
`._:@-`, starting with a letter or digit); any other id a trusted source may send (up to 256
bytes of printable text: `auth0|...`, `john+ci@...`, `spiffe://...`) is labelled `t-` + the
first 12 hex digits of its SHA-256, so no long or odd id reaches a label, a dashboard or a
response header raw. The sketch keeps at most `4 x top_n` ids, so the memory per process is
bounded too (256 bytes an id at most).
"""

from __future__ import annotations

import hashlib
import re

OTHER = "other"
HASHED_PREFIX = "t-"
_PLAIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,63}$")


def label_of(tenant: str) -> str:
    """The label of a labelled `tenant`: the id when it is a plain name, else its hash."""
    if _PLAIN.match(tenant):
        return tenant
    return HASHED_PREFIX + hashlib.sha256(tenant.encode()).hexdigest()[:12]


class TenantLabels:
    """tenant -> the label its metrics carry; counts one request per `label` call."""

    __slots__ = ("_capacity", "_counts", "_issued", "_labelled", "_max_issued", "_top_n")

    # `_issued` maps each tenant ever labelled to its label (`label_of`, computed once).

    def __init__(self, top_n: int) -> None:
        self._top_n = top_n
        self._capacity = 4 * top_n
        self._max_issued = 2 * top_n
        self._counts: dict[str, int] = {}
        self._labelled: set[str] = set()
        self._issued: dict[str, str] = {}

    def label(self, tenant: str) -> str:
        """Count one request of `tenant`; its label now (`label_of` it, or `other`)."""
        count = self._count(tenant)
        if tenant in self._labelled:
            return self._issued[tenant]
        if tenant not in self._issued and len(self._issued) >= self._max_issued:
            return OTHER
        if len(self._labelled) < self._top_n:
            return self._grant(tenant)
        weakest = min(self._labelled, key=lambda t: self._counts.get(t, 0))
        if count > self._counts.get(weakest, 0):
            self._labelled.discard(weakest)
            return self._grant(tenant)
        return OTHER

    def peek(self, tenant: str) -> str:
        """`tenant`'s label now, counting no request: its own while it holds one, else
        `other`."""
        return self._issued[tenant] if tenant in self._labelled else OTHER

    def labelled(self) -> frozenset[str]:
        """The tenants holding their own label now."""
        return frozenset(self._labelled)

    def _grant(self, tenant: str) -> str:
        self._labelled.add(tenant)
        label = self._issued.get(tenant)
        if label is None:
            label = self._issued[tenant] = label_of(tenant)
        return label

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
