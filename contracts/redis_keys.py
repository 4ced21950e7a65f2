"""Every Redis key and channel name Gearbox uses, in one place, under a configurable prefix."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_PREFIX = "gearbox"


@dataclass(frozen=True, slots=True)
class RedisKeys:
    """Key layout. `rt` = routing table; `dp` = data-plane live state; `cp` = control plane."""

    prefix: str = DEFAULT_PREFIX

    def __post_init__(self) -> None:
        if not self.prefix or any(c in self.prefix for c in " \t\r\n*?[]"):
            raise ValueError(f"invalid Redis key prefix {self.prefix!r}")

    @property
    def table_seq(self) -> str:
        """INCR counter that hands out table versions."""
        return f"{self.prefix}:rt:seq"

    def table_version(self, version: int) -> str:
        """Immutable JSON of table `version` (written once with NX)."""
        return f"{self.prefix}:rt:v:{version}"

    @property
    def table_current(self) -> str:
        """The version number data planes serve (moved by publish and rollback)."""
        return f"{self.prefix}:rt:current"

    @property
    def table_history(self) -> str:
        """Sorted set of kept versions, score = version."""
        return f"{self.prefix}:rt:history"

    @property
    def table_events(self) -> str:
        """Pub/sub channel: the new current version, as a decimal string."""
        return f"{self.prefix}:rt:events"

    @property
    def publish_lock(self) -> str:
        """Short lock held by one publisher at a time."""
        return f"{self.prefix}:rt:lock"

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

    def data_plane_state(self, instance: str) -> str:
        """Live state one data-plane instance shares (breakers, traffic); expires by TTL."""
        return f"{self.prefix}:dp:state:{instance}"

    @property
    def data_plane_state_pattern(self) -> str:
        return f"{self.prefix}:dp:state:*"

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

    @property
    def in_flight(self) -> tuple[str, str, str, str]:
        """Shared in-flight counts, so replicas do not herd: a hash of each data plane's latest
        snapshot (replica -> JSON `{endpoint: count}`), a sorted set of when each came (ms),
        their sum per endpoint (a JSON string), and which process holds each instance id (to
        notice two processes under one id). One hash tag: a script updates all four."""
        tag = f"{{{self.prefix}:dp:in-flight}}"
        return f"{tag}:snapshots", f"{tag}:seen", f"{tag}:total", f"{tag}:owners"
