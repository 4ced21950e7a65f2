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

Across replicas (`sync.shared_counts`): each replica shares its own counts of the window
(`shared`: per pair and band above the table's lowest, named by `shared_name`) through the
in-flight sums, and adds the other replicas' sums (`set_peers`) to what `above` reads, so a
line keeps room for the fleet's demand at the pair, not one replica's. A peer's count is
its window as of its last exchange: at most BUCKET_S + its wait + ours behind (about 0.2 s
at the sharing's defaults; docs/data_plane.md, "Flow control").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from data_plane.domain import CompiledTable
from data_plane.table_store import TableStore

BUCKET_S = 0.1
BUCKETS = 10  # the window: BUCKETS x BUCKET_S = 1 s
WINDOW_S = BUCKETS * BUCKET_S

_NONE: Mapping[str, float] = {}
SHARED = "\x1e"  # a shared count's name starts so (no endpoint id does): SHARED band US pair


def shared_name(pair: str, band: float) -> str:
    """The name a pair's count of one band goes under in the in-flight sums."""
    return f"{SHARED}{band!r}\x1f{pair}"


def parsed_name(name: str) -> tuple[str, float] | None:
    """(pair, band) of a `shared_name`; None for anything else."""
    if not name.startswith(SHARED):
        return None
    band, sep, pair = name[len(SHARED) :].partition("\x1f")
    if not sep:
        return None
    try:
        return pair, float(band)
    except ValueError:
        return None


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

    __slots__ = ("_cache", "_clock", "_lowest", "_peers", "_rings", "_shared")

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._rings: dict[str, dict[float, _Ring]] = {}
        self._cache: tuple[int, dict[float, Mapping[str, float]]] = (-1, {})
        self._peers: dict[str, dict[float, float]] = {}  # pair -> band -> the others' count
        self._shared: tuple[int, Mapping[str, int]] = (-1, {})
        self._lowest = -math.inf  # the table's lowest band: no line reserves against it

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
        counts: dict[str, float] = {}
        for pair, bands in self._rings.items():
            n = sum(ring.before(bucket) for b, ring in bands.items() if b > band)
            if n:
                counts[pair] = n
        for pair, peers in self._peers.items():
            theirs = sum(c for b, c in peers.items() if b > band)
            if theirs:
                counts[pair] = counts.get(pair, 0.0) + theirs
        return {pair: n / WINDOW_S for pair, n in counts.items()}

    def shared(self) -> Mapping[str, int]:
        """This replica's counts over the window before the current bucket, by
        `shared_name`, for the bands above the lowest (none 0; computed once per bucket;
        read-only)."""
        bucket = self._bucket()
        if self._shared[0] != bucket:
            counts = {
                shared_name(pair, band): n
                for pair, bands in self._rings.items()
                for band, ring in bands.items()
                if band > self._lowest and (n := ring.before(bucket))
            }
            self._shared = (bucket, counts)
        return self._shared[1]

    def set_peers(self, counts: Mapping[str, float]) -> None:
        """The other replicas' `shared` counts, summed, by `shared_name` (a missing one has
        none); `above` reads them with ours from now on."""
        peers: dict[str, dict[float, float]] = {}
        for name, n in counts.items():
            parsed = parsed_name(name)
            if parsed is not None and n > 0:
                pair, band = parsed
                peers.setdefault(pair, {})[band] = n
        if peers or self._peers:
            self._cache = (-1, {})
        self._peers = peers

    def forget(self, pairs: set[str], lowest: float = -math.inf) -> None:
        """Keep only `pairs` (a new table's): the rings of pairs no longer routed to go.
        `lowest`: the table's lowest band, which no line reserves against (not shared)."""
        for pair in [p for p in self._rings if p not in pairs]:
            del self._rings[pair]
        self._lowest = lowest
        self._shared = (-1, {})


def kept_for(store: TableStore, clock: Callable[[], float]) -> BandArrivals:
    """Arrivals on `clock` that keep each new table's pairs and know its lowest band."""
    arrivals = BandArrivals(clock)

    def on_table(table: CompiledTable) -> None:
        lowest = min((c.share for c in table.policy.priorities.values()), default=-math.inf)
        arrivals.forget({p.pair for p in table.pairs}, lowest)

    store.on_swap(on_table)
    return arrivals
