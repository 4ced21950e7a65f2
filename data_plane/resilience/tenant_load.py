"""Requests in flight per pair and tenant in this process, and the tenants it refused lately
per pair: what fair shares are judged on (`decision.fair_share`). In-flight entries go when
their count reaches 0; refusals older than `fair_share.ACTIVE_S` go when more are recorded,
and at most `MAX_REFUSED` tenants are kept per pair (the oldest go first). Event-loop thread
only; the clock is injected."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from data_plane.decision.fair_share import ACTIVE_S

MAX_REFUSED = 1024  # tenants remembered as refused, per pair

_NONE: Mapping[str, int] = {}


class TenantLoad:
    """pair -> tenant -> requests in flight; pair -> tenant -> when last refused."""

    __slots__ = ("_by_pair", "_clock", "_refused", "_totals")

    def __init__(self, clock: Callable[[], float] = lambda: 0.0) -> None:
        self._clock = clock
        self._by_pair: dict[str, dict[str, int]] = {}
        self._totals: dict[str, int] = {}
        self._refused: dict[str, dict[str, float]] = {}

    def now(self) -> float:
        return self._clock()

    def at(self, pair: str) -> Mapping[str, int]:
        return self._by_pair.get(pair, _NONE)

    def start(self, pair: str, tenant: str) -> None:
        tenants = self._by_pair.setdefault(pair, {})
        tenants[tenant] = tenants.get(tenant, 0) + 1
        self._totals[tenant] = self._totals.get(tenant, 0) + 1

    def end(self, pair: str, tenant: str) -> None:
        tenants = self._by_pair.get(pair)
        if tenants is None or tenant not in tenants:
            return
        _drop_one(self._totals, tenant)
        _drop_one(tenants, tenant)
        if not tenants:
            del self._by_pair[pair]

    def refused(self, pair: str, tenant: str) -> None:
        """`tenant` was refused at `pair` now: it counts as active there for ACTIVE_S."""
        now = self._clock()
        at = self._refused.setdefault(pair, {})
        at.pop(tenant, None)  # re-inserted last: the dict stays oldest first
        at[tenant] = now
        while at and (len(at) > MAX_REFUSED or now - next(iter(at.values())) > ACTIVE_S):
            del at[next(iter(at))]

    def alone(self, tenant: str) -> bool:
        """True when no other tenant has requests in flight here or was refused within
        ACTIVE_S: its fair share is then the whole fleet, not worth computing."""
        if len(self._totals) > 1 or (self._totals and tenant not in self._totals):
            return False
        now = self._clock()
        return not any(
            now - when <= ACTIVE_S
            for at in self._refused.values()
            for name, when in at.items()
            if name != tenant
        )

    def held(self, tenant: str) -> int:
        """`tenant`'s requests in flight here, at every pair."""
        return self._totals.get(tenant, 0)

    def active(self, tenant: str) -> int:
        """Tenants with requests in flight here or refused within ACTIVE_S, `tenant`
        included."""
        now = self._clock()
        names = set(self._totals)
        names.add(tenant)
        for at in self._refused.values():
            names.update(name for name, when in at.items() if now - when <= ACTIVE_S)
        return len(names)

    def by_pair(self) -> Mapping[str, Mapping[str, int]]:
        """Every pair's tenants in flight (read-only; for one decision)."""
        return self._by_pair

    def refusals(self) -> Mapping[str, Mapping[str, float]]:
        """Every pair's tenants refused lately, with when (read-only; for one decision)."""
        return self._refused


def _drop_one(counts: dict[str, int], key: str) -> None:
    left = counts.get(key, 0) - 1
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)
