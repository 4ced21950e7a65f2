"""Admin API: probes, Prometheus metrics and the OpenAPI document (no token needed)."""

from __future__ import annotations

from aiohttp import web
from redis.exceptions import RedisError

from control_plane.api.context import (
    METRICS_KEY,
    OPENAPI_KEY,
    SERVICES_KEY,
    ApiRoute,
    ResponseDoc,
    json_response,
)
from control_plane.api.models import Health, Readiness
from control_plane.runtime.metrics import CONTENT_TYPE


async def healthz(request: web.Request) -> web.Response:
    """The process serves; says nothing about Redis (that is /readyz)."""
    return json_response(Health(status="ok"))


async def readyz(request: web.Request) -> web.Response:
    """Ready when Redis answers PING (writes and rebuilds need it)."""
    try:
        await request.app[SERVICES_KEY].redis.ping()
    except RedisError:
        request.app[METRICS_KEY].redis_up.set(0)
        return json_response(Readiness(status="not_ready", redis=False), status=503)
    request.app[METRICS_KEY].redis_up.set(1)
    return json_response(Readiness(status="ready", redis=True))


async def _refresh_gauges(app: web.Application) -> None:
    """Gauges that mirror Redis (other publishers, e.g. the CLI, move them too)."""
    services, metrics = app[SERVICES_KEY], app[METRICS_KEY]
    try:
        count = await services.profiles.count()
        current = await services.tables.current_version()
        status = await services.tables.status()
    except RedisError:
        metrics.redis_up.set(0)
        return
    metrics.redis_up.set(1)
    metrics.profiles.set(count)
    if current is not None:
        metrics.published_version.set(current)
    published_at = status.get("last_published_at")
    if published_at:
        metrics.last_publish.set(float(published_at))


async def prometheus_metrics(request: web.Request) -> web.Response:
    await _refresh_gauges(request.app)
    return web.Response(
        body=request.app[METRICS_KEY].render(), headers={"Content-Type": CONTENT_TYPE}
    )


async def openapi_json(request: web.Request) -> web.Response:
    return web.json_response(request.app[OPENAPI_KEY])


ROUTES: tuple[ApiRoute, ...] = (
    ApiRoute(
        "GET",
        "/healthz",
        "healthz",
        healthz,
        "Liveness",
        {200: ResponseDoc("alive", "Health")},
        public=True,
        uses_redis=False,
    ),
    ApiRoute(
        "GET",
        "/readyz",
        "readyz",
        readyz,
        "Readiness: Redis reachable",
        {
            200: ResponseDoc("ready", "Readiness"),
            503: ResponseDoc("Redis is unreachable", "Readiness"),
        },
        public=True,
        uses_redis=False,
    ),
    ApiRoute(
        "GET",
        "/metrics",
        "metrics",
        prometheus_metrics,
        "Prometheus metrics (docs/METRICS.md)",
        {200: ResponseDoc("exposition text", "MetricsText", media_type="text/plain")},
        public=True,
        uses_redis=False,
    ),
    ApiRoute(
        "GET",
        "/openapi.json",
        "openapi",
        openapi_json,
        "This document",
        {200: ResponseDoc("OpenAPI 3.1 document", "OpenApiDocument")},
        public=True,
        uses_redis=False,
    ),
)
