"""Load per endpoint: requests in flight from this process plus the engine's scraped queue.

`load` is one live mapping, updated in place on every change, so building a HealthView per
request costs nothing; `choose_route` reads it synchronously. The engine's scraped count
(waiting + running) already includes this process's own requests that had reached it, so
only the rest of it (other replicas' and other clients' requests) is added to the in-flight
count: a request is never counted twice (docs/data_plane.md "Load").

With in-flight sharing on (docs/data_plane.md, "In-flight sharing"), the other replicas' recent
in-flight counts are known between scrapes too: they replace the part of the scraped count that
those replicas made up at scrape time (`outside_load`), so neither is counted twice.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager


def outside_load(scraped_others: float | None, peers_at_scrape: float, peers_now: float) -> float:
    """Load at an endpoint from outside this process (PURE).

    `scraped_others` = the last scraped count less this process's own requests (None: never
    scraped); `peers_at_scrape` = the other replicas' shared in-flight when it was taken;
    `peers_now` = their latest shared in-flight. The scrape's remainder beyond the peers is
    other clients' work, which only the scrape sees; the peers' part is taken fresh.
    """
    if scraped_others is None:
        return peers_now
    return peers_now + max(0.0, scraped_others - peers_at_scrape)


class LoadTracker:
    """In-flight counts (this process) and queue depths (scraped) per endpoint id."""

    __slots__ = ("_background", "_beyond", "_in_flight", "_load", "_others", "_peers", "_queue")

    def __init__(self) -> None:
        self._in_flight: dict[str, int] = {}
        # The router's own items at each endpoint (canary items): in no load, but in the
        # engine's queue, so a scrape subtracts them as this process's (`own_at`)
        self._background: dict[str, int] = {}
        self._queue: dict[str, float] = {}
        self._peers: dict[str, float] = {}  # the other replicas' shared in-flight, latest
        # The last scrape's count beyond this process's and the peers' requests then (other
        # clients' work): outside_load(scraped, peers at scrape, 0). outside_load grows one
        # for one with the peers' count now, so outside load = peers now + this.
        self._beyond: dict[str, float] = {}
        self._others: dict[str, float] = {}  # outside_load(...), kept for the hot path
        self._load: dict[str, float] = {}

    @property
    def load(self) -> Mapping[str, float]:
        """endpoint id -> in-flight + queue depth (missing = 0)."""
        return self._load

    def in_flight(self, endpoint_id: str) -> int:
        return self._in_flight.get(endpoint_id, 0)

    def in_flight_all(self) -> Mapping[str, int]:
        return self._in_flight

    def own_at(self, endpoint_id: str) -> int:
        """This process's requests at the endpoint, background ones included: the part of
        the engine's scraped queue that is ours."""
        return self._in_flight.get(endpoint_id, 0) + self._background.get(endpoint_id, 0)

    @contextmanager
    def background(self, endpoint_id: str) -> Iterator[None]:
        """One of the router's own items (a canary item) at `endpoint_id` while inside: in no
        load, but in the engine's queue, so a scrape subtracts it as ours (a stopped engine's
        last scrape must not make its clients wait for a slot its canary items held)."""
        held = self._background
        held[endpoint_id] = held.get(endpoint_id, 0) + 1
        try:
            yield
        finally:
            left = held.get(endpoint_id, 0) - 1
            if left > 0:
                held[endpoint_id] = left
            else:
                held.pop(endpoint_id, None)

    def queue_depth(self, endpoint_id: str) -> float | None:
        return self._queue.get(endpoint_id)

    def peers_in_flight(self) -> Mapping[str, float]:
        """The other replicas' latest shared in-flight counts per endpoint."""
        return self._peers

    def acquire(self, endpoint_id: str) -> None:
        """One more request in flight at `endpoint_id`; pair with `release` in a finally."""
        self._set_in_flight(endpoint_id, self._in_flight.get(endpoint_id, 0) + 1)

    def release(self, endpoint_id: str) -> None:
        self._set_in_flight(endpoint_id, max(0, self._in_flight.get(endpoint_id, 0) - 1))

    def set_queue_depth(self, endpoint_id: str, depth: float, own: int | None = None) -> None:
        """Record the scraped waiting + running count of an engine. `own` = how many of this
        process's requests the count includes (default: those in flight now); they are
        already in the in-flight count, so load = in flight + max(0, depth - own)."""
        mine = self._in_flight.get(endpoint_id, 0) if own is None else own
        self._queue[endpoint_id] = depth
        peers = self._peers.get(endpoint_id, 0.0)
        self._beyond[endpoint_id] = outside_load(max(0.0, depth - mine), peers, 0.0)
        self._refresh((endpoint_id,))

    def set_peers_in_flight(self, peers: Mapping[str, float]) -> None:
        """The other replicas' in-flight counts per endpoint, summed: positive counts, a
        missing endpoint has none (`peers_from` answers so). Only the endpoints whose count
        changed are recomputed."""
        before = self._peers
        after = self._peers = dict(peers)
        changed = [e for e, n in after.items() if before.get(e) != n]  # new or changed counts
        changed += before.keys() - after.keys()  # counts gone to zero
        self._refresh(changed)

    def forget(self, keep: set[str]) -> None:
        """Drop queue depths of endpoints no longer in the table (in-flight ones drain)."""
        gone = [e for e in self._queue if e not in keep]
        for endpoint_id in gone:
            del self._queue[endpoint_id]
            del self._beyond[endpoint_id]
        self._refresh(gone)

    def _refresh(self, endpoint_ids: Iterable[str]) -> None:
        """Recompute the outside load and the load of these endpoints (one pass: a sharing
        exchange in a busy fleet changes most endpoints at once)."""
        peers, beyond, in_flight = self._peers, self._beyond, self._in_flight
        others_of, load = self._others, self._load
        for endpoint_id in endpoint_ids:
            others = peers.get(endpoint_id, 0.0) + beyond.get(endpoint_id, 0.0)
            others_of[endpoint_id] = others
            load[endpoint_id] = in_flight.get(endpoint_id, 0) + others

    def _set_in_flight(self, endpoint_id: str, count: int) -> None:
        self._in_flight[endpoint_id] = count
        self._load[endpoint_id] = count + self._others.get(endpoint_id, 0.0)


class Slot:
    """A request's place in the in-flight count at the endpoint its decision chose, from the
    decision on: counted at once, so a decision made before this request reaches its engine
    (a dispatch from the queue, `flow.queue`, whose handler runs later) does not see the
    same slot free (docs/data_plane.md, "Flow control"). Freed when its first attempt takes
    its own place in the count, or when the request ends without one; freeing twice is a
    no-op."""

    __slots__ = ("_endpoint_id", "_tracker")

    def __init__(self, tracker: LoadTracker, endpoint_id: str) -> None:
        tracker.acquire(endpoint_id)
        self._tracker: LoadTracker | None = tracker
        self._endpoint_id = endpoint_id

    def free(self) -> None:
        tracker = self._tracker
        if tracker is not None:
            self._tracker = None
            tracker.release(self._endpoint_id)
