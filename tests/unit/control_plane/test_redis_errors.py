"""A Redis between masters (a Sentinel or cluster failover, a slot without an owner) is an
outage: 503 with Retry-After and `redis_unavailable`, never a 500 (control_plane/api/errors.py)."""

from __future__ import annotations

import pytest
from redis.exceptions import (
    ClusterDownError,
    MasterDownError,
    ReadOnlyError,
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.sentinel import MasterNotFoundError

from control_plane.api.errors import is_redis_outage, to_api_error


@pytest.mark.parametrize(
    "err",
    [
        SlotNotCoveredError('Slot "5979" is not covered by the cluster.'),
        ClusterDownError("CLUSTERDOWN The cluster is down"),
        MasterDownError("MASTERDOWN Link with MASTER is down"),
        TryAgainError("TRYAGAIN"),
        ReadOnlyError("READONLY You can't write against a read only replica."),
        MasterNotFoundError("No master found for 'gearbox'"),
    ],
)
def test_a_redis_between_masters_is_a_503_outage(err: Exception) -> None:
    answer = to_api_error(err)
    assert answer is not None
    assert (answer.status, answer.code) == (503, "redis_unavailable")
    assert "Retry-After" in answer.headers
    assert is_redis_outage(err)


def test_a_refused_command_is_still_a_503_naming_redis_error() -> None:
    answer = to_api_error(ResponseError("WRONGTYPE Operation against a key"))
    assert answer is not None
    assert (answer.status, answer.code) == (503, "redis_error")
    assert not is_redis_outage(ResponseError("WRONGTYPE"))
