"""Requests decided per pair and priority band over the last second in this process: the
higher bands' demand a lower class's line keeps room for (`decision.capacity.reserved_line`,
docs/data_plane.md "Flow control"; issue 32).

Each (pair, band) keeps BUCKETS counts of BUCKET_S each, reused in a ring (bounded memory:
pairs of the table x classes of the policy x BUCKETS). A band is its class's share
(`contracts.policy.PriorityClass.share`, the queue's band order): a band is above another
when its share is larger. The rate read (`above`) counts only the BUCKETS whole buckets
before the current one, so it holds for a bucket and is computed once per bucket and band
(at most BUCKET_S late). What one burst of a higher band can do is bounded by the window:
BUCKETS x BUCKET_S after its last request, it reserves nothing. Event-loop thread only; the
clock is injected.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

BUCKET_S = 0.1
BUCKETS = 10  # the window: BUCKETS x BUCKET_S = 1 s
WINDOW_S = BUCKETS * BUCKET_S

_NONE: Mapping[str, float] = {}


class _Ring:
    """One (pair, band)'s counts: per slot, the bucket it holds and its count."""

    __slots__ = ("counts", "stamps")

    def __init__(self) -> None:
        self.stamps = [-1] * BUCKETS
        self.counts = [0] * BUCKETS

    def add(self, bucket: int) -> None:
        slot = bucket % BUCKETS
        if self.stamps[slot] != bucket:
            self.stamps[slot], self.counts[slot] = bucket, 0
        self.counts[slot] += 1

    def before(self, bucket: int) -> int:
        """Requests counted in the BUCKETS whole buckets before `bucket`."""
        return sum(
            n
            for at, n in zip(self.stamps, self.counts, strict=True)
            if bucket - BUCKETS <= at < bucket
        )


class BandArrivals:
    """pair -> band (a class's share) -> requests decided there in the last WINDOW_S."""

    __slots__ = ("_cache", "_clock", "_rings")

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._rings: dict[str, dict[float, _Ring]] = {}
        self._cache: tuple[int, dict[float, Mapping[str, float]]] = (-1, {})

    def _bucket(self) -> int:
        return math.floor(self._clock() / BUCKET_S)

    def arrived(self, pair: str, band: float) -> None:
        """A request of the band `band` was decided to `pair` now."""
        bands = self._rings.setdefault(pair, {})
        ring = bands.get(band)
        if ring is None:
            ring = bands[band] = _Ring()
        ring.add(self._bucket())

    def above(self, band: float) -> Mapping[str, float]:
        """Per pair, the requests per second of the bands above `band` decided there over
        the window before the current bucket (pairs with none left out; read-only)."""
        bucket = self._bucket()
        at, rates = self._cache
        if at != bucket:
            rates = {}
            self._cache = (bucket, rates)
        found = rates.get(band)
        if found is None:
            found = rates[band] = self._rates_above(band, bucket) or _NONE
        return found

    def _rates_above(self, band: float, bucket: int) -> dict[str, float]:
        out: dict[str, float] = {}
        for pair, bands in self._rings.items():
            n = sum(ring.before(bucket) for b, ring in bands.items() if b > band)
            if n:
                out[pair] = n / WINDOW_S
        return out

    def forget(self, pairs: set[str]) -> None:
        """Keep only `pairs` (a new table's): the rings of pairs no longer routed to go."""
        for pair in [p for p in self._rings if p not in pairs]:
            del self._rings[pair]
