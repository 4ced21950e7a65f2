"""Admin bodies are typed strictly (issue 13 item 12): a value of the wrong JSON type is a 400
naming the field, never coerced (`true` is not version 1, "0.9" is not a number)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.control_plane.conftest import (
    AUTH,
    EXAMPLES,
    MakeClient,
    documented,
    example_report,
)

pytestmark = pytest.mark.integration
PAIR = "llama-3.1-8b-instruct@fp16"


async def _publish_two(client: Any) -> None:
    for path in sorted(EXAMPLES.glob("*.json")):
        resp = await client.post("/v1/profiles", data=path.read_bytes(), headers=AUTH)
        assert resp.status in (200, 201)
    assert (await client.post("/v1/tables", headers=AUTH)).status == 201
    resp = await client.put("/v1/policy", json={"latency_quantile": 0.99}, headers=AUTH)
    assert resp.status == 200
    assert (await client.post("/v1/tables", headers=AUTH)).status == 201


@pytest.mark.parametrize("version", [True, "1", 1.0, [1]])
async def test_rollback_takes_an_integer_only(make_client: MakeClient, version: object) -> None:
    client = await make_client()
    await _publish_two(client)
    resp = await client.post("/v1/tables/rollback", json={"version": version}, headers=AUTH)
    body = await documented(resp, "POST", "/v1/tables/rollback")
    assert resp.status == 400, body
    assert body["error"]["code"] == "invalid_field"
    assert body["error"]["param"] == "version"
    current = await (await client.get("/v1/tables")).json()
    assert current["current"] == 2  # nothing rolled back


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"context_length": "8192"}, "context_length"),
        ({"context_length": True}, "context_length"),
        ({"chars_per_token": "4.1"}, "chars_per_token"),
        ({"family": 8}, "family"),
    ],
)
async def test_profile_values_are_not_coerced(
    make_client: MakeClient, change: dict[str, Any], param: str
) -> None:
    client = await make_client()
    report = {**example_report(), **change}
    for method, path in (("POST", "/v1/profiles"), ("PUT", f"/v1/profiles/{PAIR}")):
        resp = await client.request(method, path, json=report, headers=AUTH)
        template = path if method == "POST" else "/v1/profiles/{pair}"
        body = await documented(resp, method, template)
        assert resp.status == 400, body
        assert body["error"]["param"] == param
    assert (await client.get(f"/v1/profiles/{PAIR}")).status == 404


@pytest.mark.parametrize(
    "policy",
    [
        {"latency_quantile": "0.99"},
        {"canary_fraction": True},
        {"categories": {"chat": {"min_accuracy": "0.8", "typical_output_tokens": 256}}},
    ],
)
async def test_policy_values_are_not_coerced(
    make_client: MakeClient, policy: dict[str, Any]
) -> None:
    client = await make_client()
    resp = await client.put("/v1/policy", json=policy, headers=AUTH)
    body = await documented(resp, "PUT", "/v1/policy")
    assert resp.status == 400, body
    assert body["error"]["code"] == "invalid_field"
