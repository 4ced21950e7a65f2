"""Gateway mode's queue as its composition root wires it (docs/gateway.md, "Flow control"):
the HTTP door's bounds, every wait also bounded by `EXTPROC_MAX_HOLD_S`, and no queue when
refusals or the queue are off."""

from __future__ import annotations

from typing import Any

from data_plane.gateway_app import GatewayProcess
from data_plane.settings import DataPlaneSettings
from data_plane.wiring import flow_settings


def settings_of(**flat: Any) -> DataPlaneSettings:
    """Settings from the flat names, as flags and the environment spell them."""
    return DataPlaneSettings(**{"redis_url": "", **flat})


def test_the_limits_carry_the_hold_bound() -> None:
    settings = settings_of(extproc_max_hold_s=0.7, flow_queue_max=9)
    assert settings.extproc.max_hold_s == 0.7
    limits = flow_settings(settings)
    assert limits is not None
    assert limits.queue_max == 9
    assert limits.queue_per_tenant == 128
    queue = GatewayProcess(settings).router.door.queue
    assert queue is not None
    assert queue.max_hold_s == 0.7


def test_no_queue_when_refusals_or_the_queue_are_off() -> None:
    assert flow_settings(settings_of(flow_queue=False)) is None
    assert flow_settings(settings_of(admission_shed=False)) is None


def test_gateway_mode_gets_the_queue_by_default() -> None:
    assert GatewayProcess(settings_of()).router.door.queue is not None
    off = settings_of(flow_queue=False)
    assert GatewayProcess(off).router.door.queue is None
