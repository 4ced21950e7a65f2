"""Live state a data-plane instance shares through Redis for the operator page.

Written by each data plane every few seconds with a TTL, read by the control plane. Never on
the request path; never carries prompts, keys or endpoint URLs.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

BreakerState = Literal["closed", "half_open", "open"]
# One number per state, worse states higher: the value of the `gearbox_circuit_state` gauge
# (0 closed, 1 half-open, 2 open) and the order in which the operator page merges instances.
BREAKER_STATE_LEVEL: dict[BreakerState, int] = {"closed": 0, "half_open": 1, "open": 2}


class _Contract(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class EndpointState(_Contract):
    endpoint_id: str = Field(max_length=200)
    pair: str = Field(max_length=200)
    breaker: BreakerState
    in_flight: int = Field(ge=0)


class PairCounters(_Contract):
    """One pair's counters since the instance started (docs/operator_page.md).

    Answers: `requests`, of which `budget_met` / `budget_missed` had a latency budget. Attempts:
    `errors` (failed attempts, and answers that broke off mid-stream), `retries` (attempts that
    followed a failed one). Cost of the answers, and what the family's baseline pair and the
    fleet baseline would have cost for the same tokens. Latency of the answers with a
    prediction: count, sums, and observed / predicted ratios by `latency_feedback` bucket.
    """

    family: str = Field(default="", max_length=200)
    requests: int = Field(default=0, ge=0)
    budget_met: int = Field(default=0, ge=0)
    budget_missed: int = Field(default=0, ge=0)
    errors: int = Field(default=0, ge=0)
    retries: int = Field(default=0, ge=0)
    cost_usd: float = Field(default=0.0, ge=0.0)
    baseline_cost_usd: float = Field(default=0.0, ge=0.0)
    fleet_baseline_cost_usd: float = Field(default=0.0, ge=0.0)
    latency_n: int = Field(default=0, ge=0)
    latency_sum_s: float = Field(default=0.0, ge=0.0)
    predicted_sum_s: float = Field(default=0.0, ge=0.0)
    ratio_counts: dict[int, int] = Field(default_factory=dict)


class ClassCounters(_Contract):
    """One tenant label's or priority class's counters since the instance started
    (docs/data_plane.md, "Tenants, priorities and admission"): requests decided, of which
    shed; answers with a latency budget met or missed; cost of the answers; and the HTTP
    door's queue ("Flow control"): requests that had to wait, and per priority class those
    waiting now and the queue's refusals by reason."""

    requests: int = Field(default=0, ge=0)
    shed: int = Field(default=0, ge=0)
    budget_met: int = Field(default=0, ge=0)
    budget_missed: int = Field(default=0, ge=0)
    cost_usd: float = Field(default=0.0, ge=0.0)
    queued: int = Field(default=0, ge=0, description="requests that had to wait")
    waiting: int = Field(default=0, ge=0, description="waiting now (priority classes only)")
    queue_refused: dict[str, int] = Field(
        default_factory=dict, description="429s by the queue per reason (priority classes only)"
    )


class DataPlaneState(_Contract):
    schema_version: str = "1.0"
    kind: Literal["DataPlaneState"] = "DataPlaneState"
    instance: str = Field(min_length=1, max_length=200)
    table_version: int | None = None
    updated_at: datetime
    # The writing process's private token (two processes with one instance id write
    # the same key; the next write notices the other's token).
    process: str | None = Field(default=None, max_length=64)
    endpoints: tuple[EndpointState, ...] = ()
    requests_by_pair: dict[str, int] = Field(default_factory=dict, description="since start")
    fallbacks_total: int = Field(default=0, ge=0)
    pairs: dict[str, PairCounters] = Field(
        default_factory=dict, description="per-pair counters since start"
    )
    tenants: dict[str, ClassCounters] = Field(
        default_factory=dict, description="per tenant label (bounded) since start"
    )
    priorities: dict[str, ClassCounters] = Field(
        default_factory=dict, description="per priority class since start"
    )
