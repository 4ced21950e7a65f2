"""Announcements between replicas (docs/data_plane.md, "Breaker announcements"): what a
replica accepts from the channel, and how Health applies an ejection heard from another."""

from __future__ import annotations

import json

import pytest

from data_plane.outcome import ConnectFailed
from data_plane.resilience.breaker import BreakerBoard, BreakerState
from data_plane.resilience.endpoint_load import LoadTracker
from data_plane.resilience.health import Health
from data_plane.settings import BreakerConfig
from data_plane.sync.breaker_announcements import BreakerAnnouncements, parse_announcement
from data_plane.sync.replica_identity import ReplicaIdentity
from data_plane.telemetry.metrics import DataPlaneMetrics


def _me() -> ReplicaIdentity:
    return ReplicaIdentity("dp-0", lambda: None, lambda: 0.0, process="p0")


def _message(**fields: object) -> bytes:
    return json.dumps({"instance": "dp-1", "endpoint": "fam@q#0", "ttl_s": 5.0, **fields}).encode()


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (_message(), ("fam@q#0", 5.0)),
        (_message(ttl_s=500.0), ("fam@q#0", 30.0)),  # capped
        (_message(instance="dp-0"), None),  # our own (an older replica signs none)
        (_message(instance="dp-0", process="p0"), None),  # our own, echoed back
        (_message(instance="dp-0", process="p9"), ("fam@q#0", 5.0)),  # another process
        (_message(ttl_s=0), None),
        (_message(ttl_s="NaN"), None),
        (_message(endpoint=""), None),
        (b"not json", None),
        (json.dumps({"endpoint": "x"}).encode(), None),
        (json.dumps([1, 2]).encode(), None),
    ],
)
def test_parse_announcement(data: bytes, expected: tuple[str, float] | None) -> None:
    assert parse_announcement(data, _me().is_own, max_ttl_s=30.0) == expected


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_an_announced_endpoint_is_skipped_for_its_time_only() -> None:
    clock = Clock()
    health = Health(BreakerBoard(BreakerConfig()), LoadTracker(), DataPlaneMetrics("t", "t"), clock)
    assert health.view().open_endpoints == frozenset()
    health.eject_for("fam@q#0", 5.0)
    assert health.view().open_endpoints == frozenset({"fam@q#0"})
    assert health.state("fam@q#0") is BreakerState.CLOSED  # its own breaker is untouched
    clock.now += 5.0
    assert health.view().open_endpoints == frozenset()


def test_an_opening_here_is_announced_with_its_cooldown() -> None:
    clock = Clock()
    board = BreakerBoard(BreakerConfig(consecutive_failures=2, cooldown_s=3.0))
    health = Health(board, LoadTracker(), DataPlaneMetrics("t", "t"), clock)
    heard: list[tuple[str, float]] = []
    health.on_open(lambda endpoint, cooldown: heard.append((endpoint, cooldown)))
    for _ in range(2):
        health.acquire("fam@q#0")
        health.release("fam@q#0", ConnectFailed())
    assert heard == [("fam@q#0", 3.0)]


def test_announce_queues_a_bounded_message() -> None:
    announcements = BreakerAnnouncements("ch", _me(), lambda e, s: None, max_ttl_s=10.0)
    announcements.announce("fam@q#0", 60.0)
    message = json.loads(announcements._outbox.get_nowait())
    assert message == {"instance": "dp-0", "process": "p0", "endpoint": "fam@q#0", "ttl_s": 10.0}
