"""A decision with no route -> the client error that says why (one mapping for every mode).

PURE: `NoRoute` in, a `RouterError` out; `errors.to_openai_error` renders it.
"""

from __future__ import annotations

from data_plane.domain import NoRoute, NoRouteReason
from data_plane.errors import (
    AllUpstreamsUnavailable,
    BudgetInfeasible,
    ModelNotFound,
    RouterError,
)

_BINDING_PARAM = {
    "too_slow": "X-Latency-Budget-Ms",
    "below_accuracy_floor": "X-Min-Accuracy",
    "too_expensive": "X-Max-Cost-Usd",
    "context_too_long": "max_tokens",
}


def no_route_error(result: NoRoute, retry_after_s: float) -> RouterError:
    """The client error for a decision with no feasible route."""
    match result.reason:
        case NoRouteReason.UNKNOWN_MODEL:
            return ModelNotFound(result.detail)
        case NoRouteReason.BUDGET_INFEASIBLE:
            param = None if result.binding is None else _BINDING_PARAM.get(result.binding)
            return BudgetInfeasible(result.detail, param=param)
        case NoRouteReason.ALL_UNHEALTHY:
            return AllUpstreamsUnavailable(result.detail, retry_after_s=retry_after_s)
