"""Replica identity (docs/data_plane.md, "Replica identity"): a default id unique per process,
and another process's message under this replica's id is a clash, said out loud."""

from __future__ import annotations

import logging

import pytest

from data_plane.settings import DataPlaneSettings
from data_plane.sync.replica_identity import ReplicaIdentity


def test_the_default_instance_id_differs_per_settings_load() -> None:
    a, b = DataPlaneSettings().instance_id, DataPlaneSettings().instance_id
    assert a != b  # hostname-pid-random: the random part differs even within one process
    assert a != "dp-0"
    assert DataPlaneSettings(instance_id="dp-7").instance_id == "dp-7"


def test_own_echoes_peers_and_clashes(caplog: pytest.LogCaptureFixture) -> None:
    clashes: list[None] = []
    now = [10.0]
    me = ReplicaIdentity("dp-0", lambda: clashes.append(None), lambda: now[0], process="p0")
    assert me.is_own("dp-0", "p0")  # our own message, echoed back
    assert me.is_own("dp-0", None)  # an older replica signs nothing: taken as ours
    assert not me.is_own("dp-1", "p1")  # a peer
    assert (clashes, me.warnings()) == ([], [])
    with caplog.at_level(logging.WARNING):
        assert not me.is_own("dp-0", "p9")  # another process with our id: a peer, and a clash
        now[0] = 13.0
        assert not me.is_own("dp-0", "p9")
    assert len(clashes) == 2
    assert [r.message for r in caplog.records].count(caplog.records[0].message) == 1
    assert "instance id 'dp-0'" in caplog.records[0].message  # logged once per other process
    now[0] = 20.0
    assert me.warnings() == [
        "duplicate instance id 'dp-0': 1 other process(es) announced it, last 7 s ago"
    ]
