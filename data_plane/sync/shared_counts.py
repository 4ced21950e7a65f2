"""What a replica shares through the in-flight sums (docs/data_plane.md, "In-flight sharing",
"Flow control"): its requests in flight per endpoint and, under names no
endpoint id has (`resilience.band_arrivals.shared_name`), its requests decided per pair and
band over the last second. Both are counts a replica holds now, which the sums add up over
the replicas and drop a dead replica's from within the TTL, so the band arrivals ride the
same exchange: no key, command or round trip of their own, a few more positions in the
group's BITFIELD while the higher bands arrive.
"""

from __future__ import annotations

from collections.abc import Mapping

from data_plane.resilience.band_arrivals import SHARED, BandArrivals
from data_plane.resilience.endpoint_load import LoadTracker


class SharedCounts:
    """`own` for `InFlightSharing` to send and `on_peers` for the others' sums it reads."""

    __slots__ = ("_arrivals", "_tracker")

    def __init__(self, tracker: LoadTracker, arrivals: BandArrivals | None) -> None:
        self._tracker, self._arrivals = tracker, arrivals

    def own(self) -> Mapping[str, int]:
        """This replica's in-flight counts, with its band arrivals where it has any (the
        tracker's own mapping, not a copy, when it has none)."""
        in_flight = self._tracker.in_flight_all()
        bands = None if self._arrivals is None else self._arrivals.shared()
        if not bands:
            return in_flight
        return {**in_flight, **bands}

    def on_peers(self, peers: Mapping[str, float]) -> None:
        """The others' sums: the endpoints' to the tracker, the bands' to the arrivals."""
        if self._arrivals is None:
            self._tracker.set_peers_in_flight(peers)
            return
        endpoints: dict[str, float] = {}
        bands: dict[str, float] = {}
        for name, count in peers.items():
            (bands if name.startswith(SHARED) else endpoints)[name] = count
        self._tracker.set_peers_in_flight(endpoints)
        self._arrivals.set_peers(bands)
