"""Every Redis key and channel name Gearbox uses, in one place, under a configurable prefix.

Keys a transaction or script uses together share a hash tag in a Redis Cluster, so each such
operation is on one slot (tests/unit/test_redis_slots.py lists them all): the routing table's
keys (`{prefix:rt}:...`) and the replicas' live states (`{prefix:dp:state}:...`, read with one
MGET), with `cluster=True` only: with Sentinel or a standalone Redis the names stay as they
always were, so no deployment changes its keys; and in-flight sharing's keys per endpoint
group (always tagged, one tag per group). Keys used alone need no tag (docs/operations.md,
"Redis topologies").
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from redis.crc import REDIS_CLUSTER_HASH_SLOTS as SLOTS
from redis.crc import key_slot

DEFAULT_PREFIX = "gearbox"


@dataclass(frozen=True, slots=True)
class RedisKeys:
    """Key layout. `rt` = routing table; `dp` = data-plane live state; `cp` = control plane."""

    prefix: str = DEFAULT_PREFIX
    cluster: bool = False  # a Redis Cluster: the table's keys carry one hash tag

    def __post_init__(self) -> None:
        # Braces would change which part of a key is its hash tag.
        if not self.prefix or any(c in self.prefix for c in " \t\r\n*?[]{}"):
            raise ValueError(f"invalid Redis key prefix {self.prefix!r}")

    @property
    def _rt(self) -> str:
        """The routing table's keys' head: one hash tag in a cluster (its keys are used
        together in the publisher's transactions), the plain prefix otherwise."""
        return f"{{{self.prefix}:rt}}" if self.cluster else f"{self.prefix}:rt"

    @property
    def table_seq(self) -> str:
        """INCR counter that hands out table versions."""
        return f"{self._rt}:seq"

    def table_version(self, version: int) -> str:
        """Immutable JSON of table `version` (written once with NX)."""
        return f"{self._rt}:v:{version}"

    @property
    def table_current(self) -> str:
        """The version number data planes serve (moved by publish and rollback)."""
        return f"{self._rt}:current"

    @property
    def table_history(self) -> str:
        """Sorted set of kept versions, score = version."""
        return f"{self._rt}:history"

    @property
    def table_events(self) -> str:
        """Pub/sub channel: the new current version, as a decimal string. In a cluster a
        sharded channel (SPUBLISH in the publisher's transaction, on the table's slot)."""
        return f"{self._rt}:events"

    @property
    def publish_lock(self) -> str:
        """Short lock held by one publisher at a time."""
        return f"{self._rt}:lock"

    @property
    def profiles(self) -> str:
        """Hash pair -> ProfileReport JSON."""
        return f"{self.prefix}:cp:profiles"

    @property
    def policy(self) -> str:
        """The routing policy the control plane builds tables with (JSON), set by the admin API."""
        return f"{self.prefix}:cp:policy"

    @property
    def control_plane_status(self) -> str:
        """Hash with the control plane's last publish outcome (for operators)."""
        return f"{self.prefix}:cp:status"

    @property
    def _dp_state(self) -> str:
        """The live states' head: one hash tag in a cluster (the UI reads them with one MGET)."""
        return f"{{{self.prefix}:dp:state}}" if self.cluster else f"{self.prefix}:dp:state"

    def data_plane_state(self, instance: str) -> str:
        """Live state one data-plane instance shares (breakers, traffic); expires by TTL."""
        return f"{self._dp_state}:{instance}"

    @property
    def data_plane_state_pattern(self) -> str:
        return f"{self._dp_state}:*"

    @property
    def feedback(self) -> str:
        """Stream of `LatencyFeedback` summaries data planes add at an interval (XADD, capped
        with MAXLEN); the control plane reads a window of it (XRANGE) to detect drift."""
        return f"{self.prefix}:dp:feedback"

    @property
    def breaker_events(self) -> str:
        """Pub/sub channel: a data plane that opened a breaker announces it (JSON
        `{"instance", "endpoint", "ttl_s"}`) so the other replicas eject the endpoint too."""
        return f"{self.prefix}:dp:breakers"

    def in_flight_group(self, group: int, groups: int = 1) -> InFlightKeys:
        """Shared in-flight counts of endpoint group `group` of `groups`, so replicas do not
        herd: the endpoints' positions, and per epoch the sum of every replica's counts and
        the set of replicas in it. One hash tag per group, so a cluster routes each of the
        group's commands to one slot's owner; the tags' slots are spread
        evenly over the slot range (`in_flight_tag`), so a cluster whose masters own equal
        ranges gets an equal share of the groups when `groups` is a multiple of its masters."""
        return InFlightKeys(in_flight_tag(self.prefix, group, groups))


@dataclass(frozen=True, slots=True)
class InFlightKeys:
    """One endpoint group's keys, all under its hash tag (so on one slot)."""

    tag: str

    @property
    def index(self) -> str:
        """Hash: each endpoint's position in the group's sums (field "" holds the last
        position handed out); it outlives every epoch's sums (docs/data_plane.md,
        "In-flight sharing")."""
        return f"{self.tag}:index"

    def sums(self, epoch: int) -> str:
        """One epoch's sum of every replica's counts: i32 big-endian per index position
        (BITFIELD's layout); it expires after the epoch."""
        return f"{self.tag}:sums:{epoch}"

    def joined(self, epoch: int) -> str:
        """Set of the replicas (`instance \\x1f process`) that entered one epoch's sums."""
        return f"{self.tag}:joined:{epoch}"


@functools.cache
def in_flight_tag(prefix: str, group: int, groups: int) -> str:
    """`{prefix:dp:in-flight:<groups>:<group>:<k>}` with the first k whose slot is in the
    group's 1/`groups` of the slot range (about `groups` tries; the number of groups is in
    the name, so replicas that disagree on it share nothing rather than mix)."""
    low, high = group * SLOTS // groups, (group + 1) * SLOTS // groups
    for k in range(SLOTS * 64):
        tag = f"{{{prefix}:dp:in-flight:{groups}:{group}:{k}}}"
        if low <= key_slot(tag.encode()) < high:
            return tag
    raise ValueError(f"no tag for in-flight group {group} of {groups}")  # never: CRC16 covers all
