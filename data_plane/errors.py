"""The RouterError tree and its one mapping to OpenAI-style error responses
(docs/style.md, section 7).

PURE: raising code names *what* went wrong; `to_openai_error` alone decides status, envelope and
headers. `normalize_upstream_error` turns any engine error body into the same envelope.
"""

# The class names are the ones docs/style.md, section 7 fixes (they read as HTTP outcomes).
# ruff: noqa: N818

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, ClassVar

INVALID_REQUEST = "invalid_request_error"
SERVER_ERROR = "server_error"
_MAX_MESSAGE_CHARS = 2000
_NO_RETRY = ("x-should-retry", "false")  # honoured by the openai SDKs (Python and Node)
_RETRY = ("x-should-retry", "true")


class RouterError(Exception):
    """Base of every error the router answers a client with.

    Subclasses fix `status`, `type` and the default `code`; instances carry the message, the
    offending field (`param`) and, for some, a Retry-After.
    """

    status: ClassVar[int] = 500
    error_type: ClassVar[str] = SERVER_ERROR
    default_code: ClassVar[str] = "internal_error"
    # Set when the router already called engines for this request (and retried as far as its
    # policy allows): a 5xx then tells client libraries not to retry (docs/reliability.md).
    engines_tried: bool = False
    # Set once the request's class and tenant label are known (X-Gearbox-Priority and
    # X-Gearbox-Tenant, `decision_step.DecisionStep.decide`): sent with the error.
    applied: tuple[tuple[str, str], ...] = ()

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code or self.default_code

    def headers(self) -> tuple[tuple[str, str], ...]:
        """Extra response headers (Retry-After, x-should-retry); none by default."""
        return ()


class InvalidRequest(RouterError):
    """Malformed body: `code` is `invalid_json` or `invalid_field`; `param` is the field path."""

    status = 400
    error_type = INVALID_REQUEST
    default_code = "invalid_field"


class InvalidBudget(RouterError):
    """A budget header has a bad value; `param` is the header name."""

    status = 400
    error_type = INVALID_REQUEST
    default_code = "invalid_budget"

    def __init__(self, message: str, *, param: str):
        super().__init__(message, param=param)


class BudgetInfeasible(RouterError):
    """Strict mode and no pair meets the budget (deterministic: a 4xx, never a 503)."""

    status = 400
    error_type = INVALID_REQUEST
    default_code = "budget_infeasible"


class Unauthorized(RouterError):
    status = 401
    error_type = INVALID_REQUEST
    default_code = "invalid_api_key"


class ModelNotFound(RouterError):
    status = 404
    error_type = INVALID_REQUEST
    default_code = "model_not_found"

    def __init__(self, message: str, *, param: str | None = "model"):
        super().__init__(message, param=param)


class PayloadTooLarge(RouterError):
    status = 413
    error_type = INVALID_REQUEST
    default_code = "payload_too_large"


class RequestTimeout(RouterError):
    """The client did not send its whole body in time (slow or stalled client)."""

    status = 408
    error_type = INVALID_REQUEST
    default_code = "request_timeout"


class _RetryAfter(RouterError):
    """An error that tells the client when to come back (whole seconds, at least 1)."""

    def __init__(self, message: str, *, retry_after_s: float):
        super().__init__(message)
        self.retry_after_s = retry_after_s

    def headers(self) -> tuple[tuple[str, str], ...]:
        seconds = self.retry_after_s if math.isfinite(self.retry_after_s) else 1.0
        return (("Retry-After", str(max(1, math.ceil(seconds)))),)


class Overloaded(_RetryAfter):
    status = 429
    error_type = "rate_limit_error"
    default_code = "router_overloaded"


class Shed(Overloaded):
    """Refused by admission (`decision.admission`) before any engine was called: load alone
    keeps the budget out of reach now; `x-should-retry: true` has the OpenAI SDKs retry
    after Retry-After (gateway mode adds llm-d's dropped-reason header)."""

    def headers(self) -> tuple[tuple[str, str], ...]:
        return (*super().headers(), _RETRY)


class UpstreamError(RouterError):
    status = 502
    default_code = "upstream_error"


class AllUpstreamsUnavailable(_RetryAfter):
    status = 503
    default_code = "no_healthy_upstream"


class DeadlineExceeded(RouterError):
    """The request's budget ran out; retrying the same budget would fail the same way."""

    status = 504
    default_code = "budget_exhausted"

    def headers(self) -> tuple[tuple[str, str], ...]:
        return (_NO_RETRY,)


class Internal(RouterError):
    """A bug. The message shown to clients is generic whatever the cause says."""

    default_code = "internal_error"

    def __init__(self, message: str = "internal error") -> None:
        super().__init__(message)


@dataclass(frozen=True, slots=True)
class ErrorResponse:
    """What a handler sends: status, JSON body `{"error": {...}}` and extra headers."""

    status: int
    body: dict[str, Any]
    headers: tuple[tuple[str, str], ...] = ()


def to_openai_error(err: RouterError) -> ErrorResponse:
    """The one mapping from RouterError to an HTTP answer (OpenAI's envelope)."""
    message = "internal error" if isinstance(err, Internal) else err.message
    body = {
        "error": {
            "message": message,
            "type": err.error_type,
            "param": err.param,
            "code": err.code,
        }
    }
    headers = (*err.headers(), *err.applied)
    if err.engines_tried and err.status >= 500 and all(k != _NO_RETRY[0] for k, _ in headers):
        headers = (*headers, _NO_RETRY)
    return ErrorResponse(status=err.status, body=body, headers=headers)


def _type_for_status(status: int) -> str:
    if status == 429:
        return "rate_limit_error"
    return INVALID_REQUEST if 400 <= status < 500 else SERVER_ERROR


def _as_text(value: Any) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value)


def _error_fields(doc: Any) -> dict[str, Any] | None:
    """The dict holding message/type/param/code in the shapes engines use, else None."""
    if not isinstance(doc, dict):
        return None
    nested = doc.get("error")
    if isinstance(nested, dict):
        return nested  # OpenAI and newer vLLM: {"error": {...}}
    if isinstance(nested, str):
        return {**doc, "message": nested}  # {"error": "text"}
    if "message" in doc:
        return doc  # older vLLM: {"object": "error", "message": ..., "code": 400}
    if "detail" in doc:
        return {"message": doc["detail"]}  # FastAPI default handlers
    return None


def normalize_upstream_error(status: int, body_bytes: bytes) -> dict[str, Any]:
    """Any engine error body (flat, nested, plain text, empty) -> `{"error": {...}}`.

    Codes become strings (vLLM sends the HTTP status as an int); a missing type is derived
    from the status; messages are capped so a huge body cannot be echoed back.
    """
    try:
        doc: Any = json.loads(body_bytes)
    except ValueError:  # JSONDecodeError and UnicodeDecodeError
        doc = None
    fields = _error_fields(doc)
    if fields is None:
        text = body_bytes.decode("utf-8", errors="replace").strip()
        fields = {"message": text or f"upstream returned HTTP {status}"}
    message = _as_text(fields.get("message")) or f"upstream returned HTTP {status}"
    error_type = fields.get("type")
    return {
        "error": {
            "message": message[:_MAX_MESSAGE_CHARS],
            "type": error_type if isinstance(error_type, str) else _type_for_status(status),
            "param": _as_text(fields.get("param")),
            "code": _as_text(fields.get("code")),
        }
    }
