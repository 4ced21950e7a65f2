"""Merges the live states data planes share in Redis into what the operator page shows.

PURE: no I/O, clock or logging; the caller reads the states and passes `now`. Shows endpoint
ids, never URLs (the states carry none).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict, Field

from contracts.live_state import BREAKER_STATE_LEVEL, BreakerState, DataPlaneState


class _View(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class InstanceView(_View):
    instance: str
    table_version: int | None
    updated_at: datetime
    age_s: float = Field(description="seconds since the instance last wrote its state")
    stale: bool = Field(description="serves another version than the current table")
    requests_total: int
    fallbacks_total: int
    open_breakers: int


class EndpointView(_View):
    endpoint_id: str
    pair: str
    breaker: BreakerState = Field(description="the worst state any instance reports")
    breakers: dict[str, BreakerState] = Field(description="instance -> its breaker state")
    in_flight: int = Field(description="summed over instances")


class LiveView(_View):
    generated_at: datetime
    current_table_version: int | None
    instances: list[InstanceView]
    endpoints: list[EndpointView]
    requests_by_pair: dict[str, int] = Field(description="summed over instances, since start")
    fallbacks_total: int
    unreadable_states: int = Field(description="state documents that did not validate")


def _instance(state: DataPlaneState, current: int | None, now: datetime) -> InstanceView:
    return InstanceView(
        instance=state.instance,
        table_version=state.table_version,
        updated_at=state.updated_at,
        age_s=max(0.0, (now - state.updated_at).total_seconds()),
        stale=current is not None and state.table_version != current,
        requests_total=sum(state.requests_by_pair.values()),
        fallbacks_total=state.fallbacks_total,
        open_breakers=sum(1 for e in state.endpoints if e.breaker == "open"),
    )


def _endpoints(states: Sequence[DataPlaneState]) -> list[EndpointView]:
    breakers: dict[tuple[str, str], dict[str, BreakerState]] = {}
    in_flight: dict[tuple[str, str], int] = {}
    for state in states:
        for e in state.endpoints:
            key = (e.pair, e.endpoint_id)
            breakers.setdefault(key, {})[state.instance] = e.breaker
            in_flight[key] = in_flight.get(key, 0) + e.in_flight
    return [
        EndpointView(
            endpoint_id=endpoint_id,
            pair=pair,
            breaker=max(by_instance.values(), key=BREAKER_STATE_LEVEL.__getitem__),
            breakers=dict(sorted(by_instance.items())),
            in_flight=in_flight[(pair, endpoint_id)],
        )
        for (pair, endpoint_id), by_instance in sorted(breakers.items())
    ]


def _aware(state: DataPlaneState) -> DataPlaneState:
    """A writer that sent a naive timestamp meant UTC (ours always send an offset)."""
    if state.updated_at.tzinfo is not None:
        return state
    return state.model_copy(update={"updated_at": state.updated_at.replace(tzinfo=UTC)})


def merge_live_states(
    states: Sequence[DataPlaneState],
    current_version: int | None,
    now: datetime,
    unreadable: int = 0,
) -> LiveView:
    """One view over every instance: instances by name, endpoints by (pair, id), traffic summed.

    `now` must be timezone-aware (states carry aware timestamps). When two documents name the
    same instance, the newer one counts.
    """
    newest: dict[str, DataPlaneState] = {}
    for state in map(_aware, states):
        seen = newest.get(state.instance)
        if seen is None or state.updated_at > seen.updated_at:
            newest[state.instance] = state
    ordered = [newest[name] for name in sorted(newest)]
    requests: dict[str, int] = {}
    for state in ordered:
        for pair, n in state.requests_by_pair.items():
            requests[pair] = requests.get(pair, 0) + n
    return LiveView(
        generated_at=now,
        current_table_version=current_version,
        instances=[_instance(s, current_version, now) for s in ordered],
        endpoints=_endpoints(ordered),
        requests_by_pair=dict(sorted(requests.items())),
        fallbacks_total=sum(s.fallbacks_total for s in ordered),
        unreadable_states=unreadable,
    )
