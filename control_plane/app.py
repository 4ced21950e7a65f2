"""`create_app(settings, deps)`: the admin API's composition root.

Registers the `ApiRoute`s (plus `deps.extra_routes`), guards writes with the bearer token
(constant-time compare), maps every failure to the error envelope in one middleware, counts
requests, and owns the Redis client and the explainer's client session in `cleanup_ctx`.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import re
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import redis.asyncio as aioredis
from aiohttp import web

from contracts.policy import Policy
from contracts.task_stop import STOP_GRACE_S, stop_tasks, where
from control_plane.api import auth, ops, policy, profiles, tables
from control_plane.api.context import (
    METRICS_KEY,
    OPENAPI_KEY,
    ROUTES_KEY,
    SERVICES_KEY,
    SETTINGS_KEY,
    ApiRoute,
    Handler,
)
from control_plane.api.errors import ApiError, is_redis_outage, to_api_error, unauthorized
from control_plane.api.models import ErrorDetail, ErrorEnvelope
from control_plane.api.openapi import build_openapi, needs_token
from control_plane.build.documents import load_policy_file
from control_plane.runtime.feedback_loop import FeedbackLoop
from control_plane.runtime.metrics import ControlPlaneMetrics
from control_plane.runtime.services import make_services
from control_plane.settings import ControlPlaneSettings
from control_plane.store.redis_connection import make_redis
from control_plane.ui import explainer, page

logger = logging.getLogger(__name__)
REQUEST_ID_HEADER = "X-Request-Id"
_REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
CORE_ROUTES: tuple[ApiRoute, ...] = (
    *profiles.ROUTES,
    *tables.ROUTES,
    *policy.ROUTES,
    *ops.ROUTES,
    *page.ROUTES,
    *auth.ROUTES,
)


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class AppDeps:
    """What tests and other entry points may swap; defaults are the production adapters."""

    clock: Callable[[], datetime] = _utc_now
    redis_factory: Callable[[ControlPlaneSettings], aioredis.Redis] = make_redis
    file_policy: Policy | None = None  # default: read settings.policy_file
    extra_routes: tuple[ApiRoute, ...] = ()


def _check_token(request: web.Request, token: bytes) -> None:
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        raise unauthorized("missing bearer token: send 'Authorization: Bearer <admin token>'")
    if not hmac.compare_digest(value.strip().encode(), token):
        raise unauthorized("invalid bearer token")


def _guarded(route: ApiRoute, token: bytes, protect_reads: bool) -> Handler:
    if not needs_token(route, protect_reads):
        return route.handler

    async def handler(request: web.Request) -> web.StreamResponse:
        _check_token(request, token)
        return await route.handler(request)

    return handler


def _error_response(err: ApiError) -> web.Response:
    detail = ErrorDetail(message=err.message, type=err.type, param=err.param, code=err.code)
    return web.Response(
        body=ErrorEnvelope(error=detail).model_dump_json().encode(),
        status=err.status,
        content_type="application/json",
        headers=err.headers,
    )


async def _answer(request: web.Request, handler: Handler) -> web.StreamResponse:
    metrics = request.app[METRICS_KEY]
    try:
        return await handler(request)
    except asyncio.CancelledError:
        raise
    except Exception as err:  # the one place failures become answers
        if is_redis_outage(err):
            metrics.redis_up.set(0)
        known = to_api_error(err)
        if known is None:
            logger.exception("unhandled error", extra={"reason": type(err).__name__})
            known = ApiError(500, "server_error", "internal_error", "internal error")
        return _error_response(known)


@web.middleware
async def _envelope_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    incoming = request.headers.get(REQUEST_ID_HEADER, "")
    request_id = incoming if _REQUEST_ID_RE.fullmatch(incoming) else uuid.uuid4().hex
    response = await _answer(request, handler)
    response.headers[REQUEST_ID_HEADER] = request_id
    name = request.match_info.route.name
    route = request.app[ROUTES_KEY].get(name or "")
    if route is not None and route.uses_redis and 200 <= response.status < 300:
        request.app[METRICS_KEY].redis_up.set(1)
    labels = {"route": name if route else "other", "status": str(response.status)}
    request.app[METRICS_KEY].admin_requests.labels(**labels).inc()
    return response


def _services_ctx(
    settings: ControlPlaneSettings, deps: AppDeps, file_policy: Policy | None
) -> Callable[[web.Application], AsyncIterator[None]]:
    async def ctx(app: web.Application) -> AsyncIterator[None]:
        redis = deps.redis_factory(settings)
        services = app[SERVICES_KEY] = make_services(redis, settings, deps.clock, file_policy)
        refits = None
        if settings.refit_check_interval_s > 0:
            loop = FeedbackLoop(
                services, settings.redis.keys.feedback, app[METRICS_KEY], deps.clock
            )
            refits = asyncio.create_task(
                loop.run(settings.refit_check_interval_s), name="gearbox-cp-refits"
            )
        try:
            yield
        finally:
            if refits is not None:  # cancelled until it ends: redis-py can swallow one cancel
                for task in await stop_tasks([refits]):
                    logger.error("did not stop within %.0f s: %s", STOP_GRACE_S, where(task))
            await redis.aclose()

    return ctx


def create_app(settings: ControlPlaneSettings, deps: AppDeps | None = None) -> web.Application:
    """The admin API. Raises ValueError without an admin token, DocumentError for a bad
    policy file: bad configuration fails here, at startup."""
    server = settings.server
    if server.admin_token is None:
        raise ValueError("admin_token is required (set GEARBOX_CP_SERVER_ADMIN_TOKEN)")
    deps = deps or AppDeps()
    file_policy = deps.file_policy
    if file_policy is None and settings.policy_file is not None:
        file_policy = load_policy_file(settings.policy_file)
    routes = (*CORE_ROUTES, *deps.extra_routes)
    token = server.admin_token.get_secret_value().strip().encode()
    app = web.Application(client_max_size=server.max_body_bytes, middlewares=[_envelope_middleware])
    app[SETTINGS_KEY] = settings
    app[METRICS_KEY] = ControlPlaneMetrics(settings.git_sha)
    app[ROUTES_KEY] = {r.name: r for r in routes}
    app[OPENAPI_KEY] = build_openapi(routes, server.protect_reads)
    for route in routes:
        handler = _guarded(route, token, server.protect_reads)
        app.router.add_route(route.method, route.path, handler, name=route.name)
    app.cleanup_ctx.append(_services_ctx(settings, deps, file_policy))
    app.cleanup_ctx.append(explainer.client_ctx)
    return app
