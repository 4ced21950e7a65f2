"""Admin API against a real redis-server: auth, field-path errors, profiles, tables, policy."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis.asyncio as aioredis

from contracts.profile_report import ProfileReport
from contracts.redis_keys import RedisKeys
from contracts.routing_table import RoutingTable
from tests.integration.control_plane.conftest import (
    AUTH,
    EXAMPLES,
    TOKEN,
    MakeClient,
    documented,
    example_report,
)

pytestmark = pytest.mark.integration
PAIR = "llama-3.1-8b-instruct@fp16"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v1/profiles"),
        ("PUT", f"/v1/profiles/{PAIR}"),
        ("DELETE", f"/v1/profiles/{PAIR}"),
        ("POST", "/v1/tables"),
        ("POST", "/v1/tables/rollback"),
        ("PUT", "/v1/policy"),
    ],
)
@pytest.mark.parametrize(
    "header", [None, "Bearer wrong-token-that-is-long-enough", "Basic abc", "Bearer "]
)
async def test_writes_need_the_token(
    make_client: MakeClient, method: str, path: str, header: str | None
) -> None:
    client = await make_client()
    headers = {"Authorization": header} if header else {}
    resp = await client.request(method, path, json=example_report(), headers=headers)
    assert resp.status == 401
    assert resp.headers["WWW-Authenticate"].startswith("Bearer")
    text = await resp.text()
    assert TOKEN not in text
    assert "wrong-token" not in text
    body = json.loads(text)
    assert body["error"]["type"] == "authentication_error"
    assert body["error"]["code"] == "invalid_token"


async def test_profile_lifecycle(make_client: MakeClient, redis_client: aioredis.Redis,
                                 redis_keys: RedisKeys) -> None:  # fmt: skip
    client = await make_client()
    report = example_report()
    resp = await client.put(f"/v1/profiles/{PAIR}", json=report, headers=AUTH)
    stored = await documented(resp, "PUT", "/v1/profiles/{pair}")
    assert resp.status == 201
    assert stored["created"] is True
    assert stored["pair"] == PAIR
    resp = await client.post(
        "/v1/profiles", json=report, headers={"Authorization": f"bearer {TOKEN}"}
    )
    assert resp.status == 200
    assert (await documented(resp, "POST", "/v1/profiles"))["created"] is False
    resp = await client.get(f"/v1/profiles/{PAIR}")
    got = await documented(resp, "GET", "/v1/profiles/{pair}")
    assert ProfileReport.model_validate(got) == ProfileReport.model_validate(report)
    resp = await client.get("/v1/profiles")
    listing = await documented(resp, "GET", "/v1/profiles")
    assert [p["pair"] for p in listing["profiles"]] == [PAIR]
    assert listing["profiles"][0]["report_sha256"] == stored["report_sha256"]
    resp = await client.delete(f"/v1/profiles/{PAIR}", headers=AUTH)
    assert resp.status == 204
    assert await documented(resp, "DELETE", "/v1/profiles/{pair}") is None
    for method in ("GET", "DELETE"):
        resp = await client.request(method, f"/v1/profiles/{PAIR}", headers=AUTH)
        body = await documented(resp, method, "/v1/profiles/{pair}")
        assert resp.status == 404
        assert body["error"]["code"] == "profile_not_found"
    assert await redis_client.hlen(redis_keys.profiles) == 0


async def _rejected(resp: Any, method: str, template: str, status: int) -> dict[str, Any]:
    body: dict[str, Any] = await documented(resp, method, template)
    assert resp.status == status, body
    return body["error"]  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("mutate", "param", "needle"),
    [
        (lambda r: r["latency"][2]["ttft_s"].update(p95=-1), "latency[2].ttft_s.p95",
         "greater than or equal to 0"),
        (lambda r: r.update(endpoints=["ftp://example.com"]), "endpoints[0]", "http(s) URL"),
        (lambda r: r["accuracy"].append(r["accuracy"][0]), None, "more than once"),
        (lambda r: r.update(schema_version="2.0"), None, "not compatible"),
        (lambda r: r.pop("provenance"), "provenance", "Field required"),
    ],
)  # fmt: skip
async def test_invalid_reports_name_the_field_and_store_nothing(
    make_client: MakeClient, redis_client: aioredis.Redis, redis_keys: RedisKeys,
    mutate: Any, param: str | None, needle: str,
) -> None:  # fmt: skip
    client = await make_client()
    report = example_report()
    mutate(report)
    resp = await client.post("/v1/profiles", json=report, headers=AUTH)
    error = await _rejected(resp, "POST", "/v1/profiles", 400)
    assert error["code"] == "invalid_field"
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert needle in error["message"]
    if param:
        assert param in error["message"]
    assert await redis_client.hlen(redis_keys.profiles) == 0


async def test_bad_bodies_and_paths(make_client: MakeClient) -> None:
    client = await make_client(max_body_bytes=4096)
    resp = await client.post("/v1/profiles", data=b"{not json", headers=AUTH)
    error = await _rejected(resp, "POST", "/v1/profiles", 400)
    assert error["code"] == "invalid_json"
    assert "line 1 column 2" in error["message"]
    resp = await client.post("/v1/profiles", data=b"x" * 5000, headers=AUTH)
    assert (await _rejected(resp, "POST", "/v1/profiles", 413))["code"] == "body_too_large"
    client = await make_client()
    resp = await client.get("/v1/profiles/no-at-sign")
    error = await _rejected(resp, "GET", "/v1/profiles/{pair}", 400)
    assert error["param"] == "pair"
    other = example_report("llama-3.1-8b-instruct@fp8")
    resp = await client.put(f"/v1/profiles/{PAIR}", json=other, headers=AUTH)
    error = await _rejected(resp, "PUT", "/v1/profiles/{pair}", 400)
    assert error["code"] == "pair_mismatch"
    assert error["param"] == "pair"
    resp = await client.get("/v1/tables/0")
    assert (await _rejected(resp, "GET", "/v1/tables/{version}", 400))["param"] == "version"
    resp = await client.get("/v1/tables/abc")
    assert (await _rejected(resp, "GET", "/v1/tables/{version}", 404))["code"] == "route_not_found"
    resp = await client.get("/v1/tables/rollback")
    assert resp.status == 405
    assert resp.headers["Allow"] == "POST"
    resp = await client.get("/v1/nowhere")
    assert resp.status == 404
    assert (await resp.json())["error"]["code"] == "route_not_found"
    resp = await client.patch("/v1/policy")
    assert resp.status == 405
    assert set(resp.headers["Allow"].split(",")) == {"GET", "PUT"}
    assert (await resp.json())["error"]["code"] == "method_not_allowed"


async def test_partial_reports_are_refused(make_client: MakeClient) -> None:
    client = await make_client()
    report = example_report()
    report["provenance"]["partial"] = True
    resp = await client.post("/v1/profiles", json=report, headers=AUTH)
    error = await _rejected(resp, "POST", "/v1/profiles", 422)
    assert error["param"] == "provenance.partial"
    lenient = await make_client(allow_partial_reports=True)
    assert (await lenient.post("/v1/profiles", json=report, headers=AUTH)).status == 201


async def _push_examples(client: Any) -> None:
    for path in sorted(EXAMPLES.glob("*.json")):
        resp = await client.post("/v1/profiles", data=path.read_bytes(), headers=AUTH)
        assert resp.status == 201, await resp.text()


async def test_tables_publish_unchanged_read_and_roll_back(make_client: MakeClient) -> None:
    client = await make_client()
    resp = await client.post("/v1/tables", headers=AUTH)
    error = await _rejected(resp, "POST", "/v1/tables", 409)
    assert error["code"] == "table_rejected"
    assert "push reports first" in error["message"]
    resp = await client.get("/v1/tables/current")
    assert (await _rejected(resp, "GET", "/v1/tables/current", 404))["code"] == "table_not_found"
    await _push_examples(client)
    resp = await client.post("/v1/tables", headers=AUTH)
    first = await documented(resp, "POST", "/v1/tables")
    assert resp.status == 201
    assert first["outcome"] == "published"
    assert first["version"] == 1
    assert first["entries"] == 5
    assert first["pruned"][0]["pair"].endswith("@int8-w8a8")
    resp = await client.post("/v1/tables", headers=AUTH)
    again = await documented(resp, "POST", "/v1/tables")
    assert resp.status == 200
    assert again["outcome"] == "unchanged"
    assert again["version"] == 1
    resp = await client.get("/v1/tables/current")
    table = RoutingTable.model_validate(await documented(resp, "GET", "/v1/tables/current"))
    assert table.version == 1
    assert table.content_sha256 == first["content_sha256"]
    # A new policy makes a new version; rollback returns to the first.
    resp = await client.put("/v1/policy", json={"latency_quantile": 0.99}, headers=AUTH)
    assert resp.status == 200
    resp = await client.post("/v1/tables", headers=AUTH)
    assert (await documented(resp, "POST", "/v1/tables"))["version"] == 2
    resp = await client.post("/v1/tables/rollback", json={"version": 1}, headers=AUTH)
    rolled = await documented(resp, "POST", "/v1/tables/rollback")
    assert rolled == {
        "version": 1,
        "previous_version": 2,
        "content_sha256": first["content_sha256"],
    }
    resp = await client.get("/v1/tables")
    history = await documented(resp, "GET", "/v1/tables")
    assert history["current"] == 1
    assert [(v["version"], v["current"]) for v in history["versions"]] == [(2, False), (1, True)]
    resp = await client.get("/v1/tables/2")
    assert (await documented(resp, "GET", "/v1/tables/{version}"))["version"] == 2
    resp = await client.get("/v1/tables/99")
    assert (await _rejected(resp, "GET", "/v1/tables/{version}", 404))["code"] == "table_not_found"
    resp = await client.post("/v1/tables/rollback", json={"version": 99}, headers=AUTH)
    error = await _rejected(resp, "POST", "/v1/tables/rollback", 404)
    assert error["code"] == "version_not_found"
    resp = await client.post("/v1/tables/rollback", json={"version": "one"}, headers=AUTH)
    assert (await _rejected(resp, "POST", "/v1/tables/rollback", 400))["param"] == "version"


async def test_rejected_builds_publish_nothing(make_client: MakeClient,
                                               redis_client: aioredis.Redis,
                                               redis_keys: RedisKeys) -> None:  # fmt: skip
    client = await make_client()
    await _push_examples(client)
    assert (await client.post("/v1/tables", headers=AUTH)).status == 201
    bad_policy = {"baselines": {"llama-3.1-8b-instruct": "llama-3.1-8b-instruct@fp4"}}
    resp = await client.put("/v1/policy", json=bad_policy, headers=AUTH)
    assert resp.status == 200  # well-formed; only a build can see the pair is unknown
    resp = await client.post("/v1/tables", headers=AUTH)
    error = await _rejected(resp, "POST", "/v1/tables", 409)
    assert (
        "policy: baselines.llama-3.1-8b-instruct: 'llama-3.1-8b-instruct@fp4'" in error["message"]
    )
    assert await redis_client.get(redis_keys.table_current) == b"1"
    status = await redis_client.hgetall(redis_keys.control_plane_status)
    assert status[b"last_outcome"] == b"rejected"
    # A stored profile that no longer validates blocks the build and is listed as invalid.
    await client.put("/v1/policy", json={}, headers=AUTH)
    await redis_client.hset(redis_keys.profiles, "x@fp16", b'{"family": "x"}')
    resp = await client.post("/v1/tables", headers=AUTH)
    error = await _rejected(resp, "POST", "/v1/tables", 409)
    assert error["code"] == "stored_data_invalid"
    assert "'x@fp16'" in error["message"]
    status = await redis_client.hgetall(redis_keys.control_plane_status)
    assert b"'x@fp16'" in status[b"last_error"]
    listing = await documented(await client.get("/v1/profiles"), "GET", "/v1/profiles")
    invalid = [p for p in listing["profiles"] if not p["valid"]]
    assert [p["pair"] for p in invalid] == ["x@fp16"]
    assert "push" in invalid[0]["problem"]
    assert await redis_client.get(redis_keys.table_current) == b"1"
    metrics = await (await client.get("/metrics")).text()
    assert 'gearbox_cp_publishes_total{outcome="rejected"} 2.0' in metrics  # policy, then data
    assert 'gearbox_cp_publishes_total{outcome="published"} 1.0' in metrics


async def test_policy_get_put(
    make_client: MakeClient, redis_keys: RedisKeys, tmp_path: Any
) -> None:
    prefix = redis_keys.prefix
    client = await make_client()
    resp = await client.get("/v1/policy")
    await documented(resp, "GET", "/v1/policy")
    assert resp.headers["X-Gearbox-Policy-Source"] == "default"
    bad = {"categories": {"chat": {"min_acuracy": 0.5}}}
    resp = await client.put("/v1/policy", json=bad, headers=AUTH)
    error = await _rejected(resp, "PUT", "/v1/policy", 400)
    assert error["param"] == "categories.chat.min_acuracy"
    assert "unknown field" in error["message"]
    resp = await client.put("/v1/policy", json={"latency_quantile": 0.9}, headers=AUTH)
    assert (await documented(resp, "PUT", "/v1/policy"))["latency_quantile"] == 0.9
    resp = await client.get("/v1/policy")
    assert resp.headers["X-Gearbox-Policy-Source"] == "redis"
    assert (await resp.json())["latency_quantile"] == 0.9
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text("latency_quantile: 0.5\n")
    # A control plane on another prefix (nothing PUT there) serves the file's policy.
    filed = await make_client(policy_file=policy_file, redis_key_prefix=f"{prefix}-file")
    resp = await filed.get("/v1/policy")
    assert resp.headers["X-Gearbox-Policy-Source"] == "file"
    assert (await resp.json())["latency_quantile"] == 0.5


async def test_probes_metrics_and_request_ids(make_client: MakeClient) -> None:
    client = await make_client()
    resp = await client.get("/healthz")
    assert await documented(resp, "GET", "/healthz") == {"status": "ok"}
    resp = await client.get("/readyz")
    assert await documented(resp, "GET", "/readyz") == {"status": "ready", "redis": True}
    assert len(resp.headers["X-Request-Id"]) == 32
    resp = await client.get("/healthz", headers={"X-Request-Id": "abc-123"})
    assert resp.headers["X-Request-Id"] == "abc-123"
    await client.get("/v1/profiles")
    resp = await client.get("/metrics")
    assert resp.status == 200
    assert resp.content_type == "text/plain"
    text = await resp.text()
    for name in (
        "gearbox_build_info{",
        'gearbox_cp_admin_requests_total{route="list_profiles",status="200"} 1.0',
        "gearbox_cp_profiles 0.0",
        'gearbox_cp_publishes_total{outcome="unchanged"} 0.0',
        "gearbox_cp_published_table_version",
        "gearbox_cp_last_publish_timestamp_seconds",
        "gearbox_cp_redis_up 1.0",
    ):
        assert name in text, name


async def test_reads_can_require_the_token(make_client: MakeClient) -> None:
    client = await make_client(protect_reads=True)
    assert (await client.get("/v1/profiles")).status == 401
    assert (await client.get("/v1/profiles", headers=AUTH)).status == 200
    assert (await client.get("/healthz")).status == 200
    doc = await (await client.get("/openapi.json")).json()
    assert "401" in doc["paths"]["/v1/profiles"]["get"]["responses"]
