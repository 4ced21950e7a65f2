"""In-flight sharing's snapshot encoding and its pure planning (docs/data_plane.md, "In-flight
sharing"): which endpoint group an endpoint is in, a replica's snapshot of one group, the
others' sum from their snapshots, and how long to wait before the next exchange.

Endpoints are spread over `groups` groups by a stable hash of their id; each group has its own
keys under its own hash tag (`contracts/redis_keys.py`), so a Redis Cluster spreads the groups
over its slots. A replica's snapshot of a group is one string: the fingerprint of its catalog
(the group's endpoints it has or ever had in flight, sorted), then its count per catalog
endpoint as a 32-bit little-endian number. Snapshots of one catalog are summed as one
matrix (numpy, in float64: exact below 2**53): 63 snapshots of 200 counts take about 60 us
(timeit, a loaded machine), against 195 us as Python big integers.
"""

from __future__ import annotations

import hashlib
import sys
import zlib
from array import array
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from operator import itemgetter

import numpy as np

FINGERPRINT = 8  # bytes of a catalog's fingerprint at the head of a snapshot
WIDTH = 4  # bytes per count
COUNT_MAX = 2**32 - 1  # a replica's count is capped here (never reached: 4e9 in flight)
if array("I").itemsize != WIDTH:  # every platform CPython supports in practice
    raise ImportError("in-flight snapshots need 32-bit array('I') items")


@dataclass(frozen=True, slots=True)
class Catalog:
    """The endpoints a snapshot's counts are of, in order, and their fingerprint."""

    endpoints: tuple[str, ...]
    fingerprint: bytes

    @classmethod
    def of(cls, endpoints: Iterable[str]) -> Catalog:
        """The catalog of these endpoints (PURE): sorted, so equal sets share one."""
        ordered = tuple(sorted(endpoints))
        return cls(ordered, _fingerprint(_text(ordered)))

    @classmethod
    def parse(cls, fingerprint: bytes, text: bytes | None) -> Catalog | None:
        """The catalog Redis held under `fingerprint` (PURE); None when missing or not it."""
        if text is None or _fingerprint(text) != fingerprint:
            return None
        return cls(tuple(text.decode().split("\n")) if text else (), fingerprint)

    @property
    def text(self) -> bytes:
        """The catalog as Redis keeps it: the endpoint ids, one a line."""
        return _text(self.endpoints)


def _text(endpoints: tuple[str, ...]) -> bytes:
    return "\n".join(endpoints).encode()


def _fingerprint(text: bytes) -> bytes:
    return hashlib.blake2b(text, digest_size=FINGERPRINT).digest()


def encode(catalog: Catalog, own: Mapping[str, int]) -> bytes:
    """This replica's snapshot of one group (PURE): fingerprint, then a count per endpoint."""
    get = own.get
    values = [get(e, 0) for e in catalog.endpoints]
    try:
        counts = array("I", values)
    except OverflowError:  # below zero (never: a count is released once) or past 2**32
        counts = array("I", [min(max(n, 0), COUNT_MAX) for n in values])
    if sys.byteorder == "big":
        counts.byteswap()
    return catalog.fingerprint + counts.tobytes()


def fingerprints(snapshots: Iterable[bytes | None]) -> set[bytes]:
    """The catalogs these snapshots name (PURE); an expired one (None) names none."""
    return set(map(_HEAD, filter(None, snapshots)))  # in C: no bytecode per snapshot


_HEAD = itemgetter(slice(0, FINGERPRINT))


def sum_snapshots(
    snapshots: Iterable[bytes], catalogs: Mapping[bytes, Catalog]
) -> dict[str, float]:
    """The sum of the snapshots' counts per endpoint, positive ones only (PURE). A snapshot
    whose catalog is unknown, or whose length does not fit it, counts as none."""
    snapshots = list(snapshots)
    heads = set(map(_HEAD, snapshots))
    only = catalogs.get(heads.pop()) if len(heads) == 1 else None
    if only is not None and set(map(len, snapshots)) == {FINGERPRINT + WIDTH * len(only.endpoints)}:
        return _summed(only.endpoints, b"".join(snapshots), len(snapshots), FINGERPRINT)
    by_catalog: dict[bytes, list[bytes]] = {}
    for snapshot in snapshots:
        catalog = catalogs.get(snapshot[:FINGERPRINT])
        if catalog is not None and len(snapshot) == FINGERPRINT + WIDTH * len(catalog.endpoints):
            by_catalog.setdefault(catalog.fingerprint, []).append(snapshot[FINGERPRINT:])
    summed: dict[str, float] = {}
    for fingerprint, bodies in by_catalog.items():
        part = _summed(catalogs[fingerprint].endpoints, b"".join(bodies), len(bodies), 0)
        if summed:  # a second catalog: add up
            for name, n in part.items():
                summed[name] = summed.get(name, 0.0) + n
        else:
            summed = part
    return summed


def _summed(names: tuple[str, ...], joined: bytes, rows: int, head: int) -> dict[str, float]:
    """`rows` snapshots of one catalog laid end to end (each with `head` bytes before its
    counts), summed per endpoint in 64 bits; positive sums only."""
    matrix = np.frombuffer(joined, dtype="<u4").reshape(rows, head // WIDTH + len(names))
    totals = matrix[:, head // WIDTH :].sum(axis=0, dtype=np.float64).tolist()  # exact < 2**53
    return {name: n for name, n in zip(names, totals, strict=True) if n}


def group_of(endpoint: str, groups: int) -> int:
    """The endpoint's group (PURE): a hash of its id every replica computes alike."""
    return zlib.crc32(endpoint.encode()) % groups


def next_wait_s(
    replicas_held: int, quiet: int, interval_s: float, max_interval_s: float, ttl_s: float
) -> float:
    """Until the next exchange (PURE). While other replicas are heard: `interval_s` after an
    exchange that changed something (our counts or the others' snapshots), doubled for each
    quiet exchange in a row up to `max_interval_s`; alone (or after a failed exchange) every
    `ttl_s` / 2, so our counts never expire."""
    if replicas_held <= 1:
        return max(interval_s, ttl_s / 2)
    grown = interval_s * float(2 ** min(quiet, 16))
    return max(interval_s, min(max_interval_s, grown))
