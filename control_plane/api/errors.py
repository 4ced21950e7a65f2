"""The admin API's one error type and the one place exceptions become HTTP answers.

Every error body is `{"error": {"message", "type", "param", "code"}}`; bad input is a 4xx that
names the field, Redis trouble a 503, and anything unexpected a generic 500.
"""

from __future__ import annotations

from aiohttp import web
from redis.exceptions import (
    ClusterDownError,
    ReadOnlyError,
    RedisClusterException,
    RedisError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from control_plane.build.documents import DocumentError
from control_plane.build.table import BuildError
from control_plane.store.publisher import (
    PublishBusyError,
    PublishConflictError,
    PublishError,
    VersionNotFoundError,
)
from control_plane.store.stored_data import StoredDataError

REDIS_RETRY_AFTER_S = "5"


class ApiError(Exception):
    """An answer other than success; `param` is the offending field's path, when there is one.

    (A plain class: frozen-dataclass exceptions break when context managers set __traceback__.)
    """

    def __init__(
        self,
        status: int,
        type: str,
        code: str,
        message: str,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.type = type
        self.code = code
        self.message = message
        self.param = param
        self.headers = headers or {}


def bad_request(message: str, param: str | None, code: str = "invalid_field") -> ApiError:
    return ApiError(400, "invalid_request_error", code, message, param)


def not_found(message: str, code: str) -> ApiError:
    return ApiError(404, "not_found_error", code, message)


def unauthorized(message: str) -> ApiError:
    headers = {"WWW-Authenticate": 'Bearer realm="gearbox-control-plane"'}
    return ApiError(401, "authentication_error", "invalid_token", message, None, headers)


# Unreachable, or between masters: a cluster without an owner for a slot (a failover, a slot
# not covered) or mid-resharding, a Sentinel master demoted under a client's connection.
_OUTAGES = (
    RedisConnectionError,
    RedisTimeoutError,
    ClusterDownError,
    TryAgainError,
    ReadOnlyError,
    RedisClusterException,
)


def redis_unavailable(err: RedisError | RedisClusterException) -> ApiError:
    reachable = not isinstance(err, _OUTAGES)
    message = (
        f"Redis refused the command: {err}" if reachable else "Redis is unavailable; retry later"
    )
    return ApiError(
        503,
        "server_error",
        "redis_error" if reachable else "redis_unavailable",
        message,
        None,
        {"Retry-After": REDIS_RETRY_AFTER_S},
    )


def _from_publish_error(err: PublishError) -> ApiError:
    if isinstance(err, VersionNotFoundError):
        return not_found(str(err), "version_not_found")
    if isinstance(err, PublishBusyError):
        return ApiError(409, "conflict_error", "publish_in_progress", str(err), None)
    if isinstance(err, PublishConflictError):
        return ApiError(409, "conflict_error", "publish_conflict", str(err), None)
    return ApiError(409, "conflict_error", "publish_failed", str(err), None)


def _from_http(err: web.HTTPException) -> ApiError:
    if err.status == 404:
        return not_found("no such route", "route_not_found")
    if err.status == 405:
        allow = {"Allow": err.headers["Allow"]} if "Allow" in err.headers else {}
        message = f"method not allowed; this path allows {allow.get('Allow', 'other methods')}"
        return ApiError(405, "invalid_request_error", "method_not_allowed", message, None, allow)
    if err.status == 413:
        return ApiError(413, "invalid_request_error", "body_too_large", err.text or err.reason)
    return ApiError(err.status, "invalid_request_error", f"http_{err.status}", err.reason)


def to_api_error(err: Exception) -> ApiError | None:
    """The HTTP answer for a known failure, or None for a bug (the caller answers 500)."""
    match err:
        case ApiError():
            return err
        case DocumentError():
            return bad_request(f"invalid {err}", err.param, err.code)
        case BuildError():  # the stored profiles or policy cannot make a table: a state conflict
            return ApiError(409, "conflict_error", "table_rejected", str(err))
        case StoredDataError():
            return ApiError(409, "conflict_error", "stored_data_invalid", str(err))
        case PublishError():
            return _from_publish_error(err)
        case RedisError() | RedisClusterException():
            return redis_unavailable(err)
        case web.HTTPException():
            return _from_http(err)
    return None


def is_redis_outage(err: Exception) -> bool:
    return isinstance(err, _OUTAGES)
