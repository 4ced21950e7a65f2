"""Redis down: the admin API answers 503 with a clear error (never 500) and recovers."""

from __future__ import annotations

import pytest

from tests.integration.control_plane.conftest import AUTH, MakeClient, documented, example_report
from tests.support.redis_server import running_redis

pytestmark = pytest.mark.integration


async def test_redis_down_is_503_and_recovers(make_client: MakeClient) -> None:
    with running_redis() as server:
        client = await make_client(url=server.url)
        assert (await client.get("/readyz")).status == 200
        server.stop()
        calls = [
            ("GET", "/v1/profiles", "/v1/profiles", None),
            ("POST", "/v1/profiles", "/v1/profiles", example_report()),
            ("POST", "/v1/tables", "/v1/tables", None),
            ("GET", "/v1/tables/current", "/v1/tables/current", None),
            ("GET", "/v1/tables/3", "/v1/tables/{version}", None),
            ("POST", "/v1/tables/rollback", "/v1/tables/rollback", {"version": 1}),
            ("PUT", "/v1/policy", "/v1/policy", {}),
        ]
        for method, path, template, body in calls:
            resp = await client.request(method, path, json=body, headers=AUTH)
            error = (await documented(resp, method, template))["error"]
            assert resp.status == 503, (method, path)
            assert error["code"] == "redis_unavailable"
            assert error["type"] == "server_error"
            assert "Redis is unavailable" in error["message"]
            assert resp.headers["Retry-After"] == "5"
        resp = await client.get("/readyz")
        assert await documented(resp, "GET", "/readyz") == {"status": "not_ready", "redis": False}
        assert resp.status == 503
        metrics = await (await client.get("/metrics")).text()
        assert "gearbox_cp_redis_up 0.0" in metrics
        assert 'gearbox_cp_publishes_total{outcome="failed"} 1.0' in metrics
        assert (await client.get("/healthz")).status == 200
        # RedisProcess.start() drops the stopped process's stderr pipe unclosed; close it here
        # so no ResourceWarning fires (reported to the owner of tests/support).
        if server.process.stderr is not None:
            server.process.stderr.close()
        server.start()
        resp = await client.get("/v1/profiles")
        assert resp.status == 200
        metrics = await (await client.get("/metrics")).text()
        assert "gearbox_cp_redis_up 1.0" in metrics
        assert 'gearbox_cp_admin_requests_total{route="list_profiles",status="503"} 1.0' in metrics
