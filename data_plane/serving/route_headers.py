"""The X-Route-* headers of a routed answer, and the one X-Route-Reason string both front
doors send (the HTTP door on the answer, gateway mode as `x-gearbox-route-reason` on the
request it hands Envoy: `gateway/router.py`)."""

from __future__ import annotations

import math

from data_plane.domain import Candidate, CategoryDoubt, RouteDecision, RouteReason

# A request that waited in the flow-control queue: its wait, in whole milliseconds rounded
# up (the HTTP door's `serving.handlers`; absent when it did not wait).
QUEUED_HEADER = "X-Route-Queued-Ms"


def route_reason(reason: RouteReason, cand: Candidate, doubt: CategoryDoubt | None) -> str:
    """Why `cand` answers: the decision's `reason`, or a best-effort candidate's own reason
    (what the table leaves unproven for its pair) with its chance of meeting the request
    (docs/data_plane.md, "Best effort"); then, when the classifier was unsure, its doubt."""
    chance = cand.chance
    text = reason.value if chance is None else chance.reason + chance.reason_suffix
    return text if doubt is None else text + doubt.reason_suffix


def route_headers(
    decision: RouteDecision,
    table_version: int,
    cand: Candidate,
    attempts: int,
    doubt: CategoryDoubt | None = None,
) -> dict[str, str]:
    """The X-Route-* headers of a routed answer (never an endpoint URL)."""
    return {
        "X-Route-Pair": cand.pair.pair,
        "X-Route-Reason": route_reason(decision.reason, cand, doubt),
        "X-Route-Table-Version": str(table_version),
        "X-Route-Predicted-Latency-Ms": str(math.ceil(cand.predicted_latency_s * 1000)),
        "X-Route-Estimated-Cost-Usd": f"{cand.estimated_cost_usd:.8f}",
        "X-Route-Attempts": str(attempts),
    }
