"""In-flight sums kept by Redis, per epoch: the pure planning (docs/data_plane.md, "In-flight
sharing"): which endpoint group an endpoint is in, the epochs a replica is in, the BITFIELD
arguments of its changes, the others' counts from the sums, and the wait before the next
exchange.

Per endpoint group, Redis keeps the sum of every replica's in-flight counts as one string of
signed 32-bit big-endian counts, BITFIELD's layout, one position per endpoint (the group's
index, a hash endpoint -> position that every replica reads). A replica adds only what changed
since its last write, with one `BITFIELD key INCRBY i32 #p delta ...` (two neighbouring
positions in one `INCRBY i64`), and reads the sums with one GET: Redis's work grows with the
changed counts, not with the replicas.

A replica that dies leaves its counts in the sums, so the sums are kept per epoch: `period_s`
of Redis's clock. A replica is in the epoch of the time, and from `lead_s` before the next
epoch starts in that one too. It enters an epoch by adding its whole counts (absolute), then
adds each change to every epoch it is in. Readers read the epoch of the time: everyone alive
entered it at least `lead_s` before it started (or on their first exchange), and a replica
that died is gone from it at most `period_s + lead_s` after its last write. A write that got
no answer may or may not have reached an epoch: that epoch is barred (never written again);
the replica enters the next one whole. Adds commute, so an epoch's sums are exact whatever
the order of the replicas' writes.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

WIDTH = 4  # bytes per count (i32)
LEAD_SHARE = 0.2  # of the TTL: how long before an epoch starts a replica enters it
Counts = npt.NDArray[np.int64]


def epoch_lengths(ttl_s: float) -> tuple[float, float]:
    """An epoch's length and the lead before it (PURE): a dead replica's counts are gone from
    the sums within `period + lead` = the TTL of its last write."""
    return ttl_s * (1.0 - LEAD_SHARE), ttl_s * LEAD_SHARE


def epochs_due(now_s: float, period_s: float, lead_s: float) -> tuple[int, ...]:
    """The epochs a replica is in at `now_s` (PURE): the one read first, then the next once
    within `lead_s` of it."""
    current = math.floor(now_s / period_s)
    if now_s >= (current + 1) * period_s - lead_s:
        return current, current + 1
    return (current,)


def grown(counts: Counts, size: int) -> Counts:
    """`counts` padded with zeros to at least `size` positions (PURE)."""
    if len(counts) >= size:
        return counts
    return np.concatenate([counts, np.zeros(size - len(counts), dtype=np.int64)])


def increments(changes: Counts) -> tuple[list[bytes], bytes]:
    """BITFIELD's arguments after the key that add `changes` position by position, and the
    same as RESP bulk strings (PURE: packed here, one format per operation, not per argument);
    the positions whose change is 0 are left out. Two changed positions side by side take one
    `INCRBY i64` at the first one's bit offset, adding `first * 2**32 + second`: exact while
    the second position's sum stays within [0, 2**31) before and after, so no carry or
    borrow crosses into the first (a sum of counts that are never negative does; Redis's
    cost is per operation: a replica entering an epoch with every endpoint busy sends half
    the operations)."""
    positions = np.flatnonzero(changes)
    at, deltas = positions.tolist(), changes[positions].tolist()
    args: list[bytes] = []
    packed: list[bytes] = []
    i, n = 0, len(at)
    while i < n:
        position, change = at[i], deltas[i]
        if i + 1 < n and at[i + 1] == position + 1:
            slot, delta = b"%d" % (32 * position), b"%d" % ((change << 32) + deltas[i + 1])
            args += [b"INCRBY", b"i64", slot, delta]
            packed.append(_INCRBY % (b"64", len(slot), slot, len(delta), delta))
            i += 2
            continue
        slot, delta = b"#%d" % position, b"%d" % change
        args += [b"INCRBY", b"i32", slot, delta]
        packed.append(_INCRBY % (b"32", len(slot), slot, len(delta), delta))
        i += 1
    return args, b"".join(packed)


_INCRBY = b"$6\r\nINCRBY\r\n$3\r\ni%b\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n"


def decoded(sums: bytes | None) -> Counts:
    """The sums Redis holds (PURE): a missing key holds none; a trailing partial count (never
    written by BITFIELD) is ignored."""
    if not sums:
        return np.zeros(0, dtype=np.int64)
    whole = len(sums) - len(sums) % WIDTH
    return np.frombuffer(sums[:whole], dtype=">i4").astype(np.int64)


def others(sums: Counts, mine: Counts) -> Counts:
    """The other replicas' counts: the sums less ours, none below zero (PURE)."""
    size = max(len(sums), len(mine))
    difference: Counts = grown(sums, size) - grown(mine, size)
    return np.maximum(difference, 0, out=difference)


def named(counts: Counts, names: Sequence[str | None]) -> dict[str, float] | None:
    """The positive counts by endpoint (PURE); None when one is at a position whose endpoint
    is not known yet (the index grew since it was read)."""
    positions = np.flatnonzero(counts)
    if not positions.size:
        return {}
    if positions[-1] >= len(names):
        return None
    endpoints = [names[p] for p in positions.tolist()]
    if None in endpoints:
        return None
    return dict(zip(endpoints, counts[positions].astype(np.float64).tolist(), strict=True))  # type: ignore[arg-type]  # no None left


def group_of(endpoint: str, groups: int) -> int:
    """The endpoint's group (PURE): a hash of its id every replica computes alike."""
    return zlib.crc32(endpoint.encode()) % groups


def next_wait_s(
    replicas_held: int, quiet: int, interval_s: float, max_interval_s: float, lead_s: float
) -> float:
    """Until the next exchange (PURE). While other replicas are heard: `interval_s` after an
    exchange that changed something (our counts or the others'), doubled for each quiet
    exchange in a row up to `max_interval_s`; alone (or after a failed exchange) `lead_s`.
    Never longer than `lead_s` (nor shorter than `interval_s`), so that a replica enters
    every epoch before it is read."""
    if replicas_held <= 1:
        return max(interval_s, lead_s)
    grown = interval_s * float(2 ** min(quiet, 16))
    return max(interval_s, min(max_interval_s, grown, lead_s))
