"""Liveness, readiness and metrics: the three routes every Gearbox process with an HTTP side
serves (the data plane's app, and gateway mode's side app).

With `SERVER_METRICS_TOKEN` set, `/metrics` answers only `Authorization: Bearer <token>`
(compared in constant time; else 401 with `WWW-Authenticate: Bearer`): its series name
tenants, pairs and the fleet's traffic. Unset (the default), it is open, as Prometheus's
default scrape expects.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import SecretStr

from data_plane.errors import Unauthorized, to_openai_error
from data_plane.request.tenant import bearer_token
from data_plane.table_store import TableStore
from data_plane.telemetry.metrics import DataPlaneMetrics


class Probes:
    """For the kubelet and Prometheus: ready once a routing table is loaded."""

    def __init__(
        self,
        store: TableStore,
        metrics: DataPlaneMetrics,
        identity: tuple[str, Callable[[], list[str]]] = ("", list),
        metrics_token: SecretStr | None = None,
    ) -> None:
        self._store = store
        self._metrics = metrics
        self._token = None if metrics_token is None else metrics_token.get_secret_value().encode()
        # (instance id, what /readyz warns about it: `sync.replica_identity`)
        self._identity = identity

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/healthz", self.healthz, name="healthz", allow_head=False),
            web.get("/readyz", self.readyz, name="readyz", allow_head=False),
            web.get("/metrics", self.metrics, name="metrics", allow_head=False),
        ]

    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(self, request: web.Request) -> web.Response:
        version = self._store.version
        instance, warnings = self._identity
        return web.json_response(
            {
                "ready": version is not None,
                "table_version": version,
                "instance_id": instance,
                "warnings": warnings(),
            },
            status=200 if version is not None else 503,
        )

    async def metrics(self, request: web.Request) -> web.Response:
        if self._token is not None:
            given = (bearer_token(request.headers) or "").encode(errors="replace")
            if not hmac.compare_digest(given, self._token):
                answer = to_openai_error(
                    Unauthorized("/metrics needs its bearer token", code="invalid_metrics_token")
                )
                headers = {"WWW-Authenticate": "Bearer"}
                return web.json_response(answer.body, status=answer.status, headers=headers)
        body = generate_latest(self._metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})
