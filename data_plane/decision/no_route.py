"""A decision with no route -> the client error that says why (one mapping for every mode).

PURE: `NoRoute` in, a `RouterError` out; `errors.to_openai_error` renders it. Shared by the
HTTP data plane and the ext_proc gateway mode.
"""

from __future__ import annotations

from data_plane.decision.rejections import RULE_WORDS
from data_plane.domain import NoRoute, NoRouteReason, Rejection
from data_plane.errors import (
    AllUpstreamsUnavailable,
    BudgetInfeasible,
    ModelNotFound,
    RouterError,
)


def no_route_error(result: NoRoute, retry_after_s: float) -> RouterError:
    """The client error for a decision with no feasible route."""
    match result.reason:
        case NoRouteReason.UNKNOWN_MODEL:
            return ModelNotFound(result.detail)
        case NoRouteReason.BUDGET_INFEASIBLE:
            param = None if result.binding is None else RULE_WORDS[result.binding].param
            too_long = result.binding is Rejection.CONTEXT_TOO_LONG  # OpenAI's code for it
            code = "context_length_exceeded" if too_long else None
            return BudgetInfeasible(result.detail, param=param, code=code)
        case NoRouteReason.ALL_UNHEALTHY:
            return AllUpstreamsUnavailable(result.detail, retry_after_s=retry_after_s)
