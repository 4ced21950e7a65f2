"""PURE: the one mapping from the RouterError tree (`data_plane/errors.py`) to the `outcome`
label of `gearbox_requests_total` (docs/METRICS.md), used by both front doors: the HTTP
middleware (`serving/middleware.py`) and gateway mode's ext_proc service
(`gateway/service.py`), so a request counts the same whichever door it came through."""

from __future__ import annotations

from data_plane import errors
from data_plane.telemetry.metrics import RequestOutcome

# Most specific first: `Shed` is an `Overloaded`.
_OUTCOMES: tuple[tuple[type[errors.RouterError], RequestOutcome], ...] = (
    (errors.BudgetInfeasible, RequestOutcome.BUDGET_INFEASIBLE),
    (errors.Shed, RequestOutcome.SHED),
    (errors.Unauthorized, RequestOutcome.UNAUTHORIZED),
    (errors.ModelNotFound, RequestOutcome.NO_ROUTE),
    (errors.Overloaded, RequestOutcome.OVERLOADED),
    (errors.UpstreamError, RequestOutcome.UPSTREAM_ERROR),
    (errors.AllUpstreamsUnavailable, RequestOutcome.UNAVAILABLE),
    (errors.DeadlineExceeded, RequestOutcome.DEADLINE_EXCEEDED),
    (errors.Internal, RequestOutcome.INTERNAL_ERROR),
)


def outcome_of(err: errors.RouterError) -> RequestOutcome:
    """The outcome a request answered with `err` counts: its class's row, else
    `internal_error` for a 5xx and `invalid_request` for the other (client) errors."""
    for cls, outcome in _OUTCOMES:
        if isinstance(err, cls):
            return outcome
    return RequestOutcome.INTERNAL_ERROR if err.status >= 500 else RequestOutcome.INVALID_REQUEST
