"""Who this replica is to the others, and what it does when another process claims its name.

Replicas tell each other things under their instance id: breaker announcements, in-flight
snapshots, the live state key. Two processes with the same id would drop each other's
announcements and in-flight counts as their own echo and overwrite each other's live state,
silently. So every message also carries a token no other process has (`process`), the default
id is unique per process (`settings.default_instance_id`), and a message with this replica's
id but another process's token is said out loud: a WARNING log (once per other process),
`gearbox_instance_id_clashes_total`, and a warning in `/readyz` (docs/data_plane.md, "Replica
identity"). Such a message is then treated as a peer's: the other process is a real replica
whatever its name.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable

logger = logging.getLogger(__name__)


class ReplicaIdentity:
    """This process's instance id and private token; notices other processes using the id."""

    __slots__ = ("_clock", "_on_clash", "_others", "instance_id", "last_clash_s", "process")

    def __init__(
        self,
        instance_id: str,
        on_clash: Callable[[], None],
        clock: Callable[[], float],
        process: str | None = None,
    ) -> None:
        self.instance_id = instance_id
        self.process = process or secrets.token_hex(8)
        self._on_clash = on_clash
        self._clock = clock
        self._others: set[str] = set()  # tokens of other processes seen with our id
        self.last_clash_s: float | None = None

    def is_own(self, instance: object, process: object) -> bool:
        """Did this process send a message signed (`instance`, `process`)? A message with our
        id and another token (a missing one is an older replica's: taken as ours, as before)
        is a clash: counted, logged, and not ours."""
        if instance != self.instance_id:
            return False
        if process is None or process == self.process:
            return True
        self._clash(str(process))
        return False

    def _clash(self, other: str) -> None:
        self.last_clash_s = self._clock()
        self._on_clash()
        if other in self._others:
            return
        self._others.add(other)
        logger.warning(
            "another process uses this replica's instance id %r: they drop each other's "
            "breaker announcements and in-flight counts and overwrite each other's live "
            "state; give every replica its own GEARBOX_DP_INSTANCE_ID (or leave it unset)",
            self.instance_id,
            extra={"instance": self.instance_id, "reason": "duplicate_instance_id"},
        )

    def warnings(self) -> list[str]:
        """What `/readyz` says about the id (empty while no other process used it)."""
        if self.last_clash_s is None:
            return []
        ago_s = self._clock() - self.last_clash_s
        return [
            f"duplicate instance id {self.instance_id!r}: {len(self._others)} other "
            f"process(es) announced it, last {ago_s:.0f} s ago"
        ]
