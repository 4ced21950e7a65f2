"""Gateway mode's queue as its composition root wires it (docs/gateway.md, "Flow control"):
the HTTP door's bounds, every wait also bounded by `EXTPROC_MAX_HOLD_S`, and no queue when
refusals or the queue are off."""

from __future__ import annotations

from typing import Any

from data_plane.gateway_app import GatewayProcess
from data_plane.serving.flow import FlowLimits
from data_plane.settings import DataPlaneSettings
from data_plane.wiring import flow_limits


def settings_of(**flat: Any) -> DataPlaneSettings:
    """Settings from the flat names, as flags and the environment spell them."""
    return DataPlaneSettings(**{"redis_url": "", **flat})


def test_the_limits_carry_the_hold_bound() -> None:
    settings = settings_of(extproc_max_hold_s=0.7, flow_queue_max=9)
    assert settings.extproc.max_hold_s == 0.7
    assert flow_limits(settings, settings.extproc.max_hold_s) == FlowLimits(9, 128, 30.0, 0.7)
    assert flow_limits(settings) == FlowLimits(9, 128, 30.0, None)  # the HTTP door's


def test_no_queue_when_refusals_or_the_queue_are_off() -> None:
    assert flow_limits(settings_of(flow_queue=False), 0.7) is None
    assert flow_limits(settings_of(admission_shed=False), 0.7) is None


def test_gateway_mode_gets_the_queue_by_default() -> None:
    assert GatewayProcess(settings_of()).router.door.queue is not None
    off = settings_of(flow_queue=False)
    assert GatewayProcess(off).router.door.queue is None
