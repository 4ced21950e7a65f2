"""The OpenAPI document matches the served routes and the exported contract schemas."""

from __future__ import annotations

import json
from typing import Any

from pydantic import SecretStr

from contracts.schemas_export import SCHEMA_DIR
from control_plane.api.openapi import build_openapi
from control_plane.app import CORE_ROUTES, create_app
from control_plane.settings import ControlPlaneSettings, ServerSettings

SETTINGS = ControlPlaneSettings(server=ServerSettings(admin_token=SecretStr("x" * 32)))


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return own + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


def test_every_served_route_is_documented_and_nothing_else() -> None:
    app = create_app(SETTINGS)
    served = {
        (r.method, r.resource.canonical) for r in app.router.routes() if r.resource is not None
    }
    doc = build_openapi(CORE_ROUTES, protect_reads=False)
    documented = {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops}
    assert served == documented
    assert doc["openapi"].startswith("3.1")


def test_every_reference_resolves() -> None:
    doc = build_openapi(CORE_ROUTES, protect_reads=False)
    schemas = doc["components"]["schemas"]
    for ref in _refs(doc):
        assert ref.startswith("#/components/schemas/"), ref
        assert ref.rsplit("/", 1)[1] in schemas, ref


def test_request_bodies_use_the_exported_contract_schemas() -> None:
    doc = build_openapi(CORE_ROUTES, protect_reads=False)
    schemas = doc["components"]["schemas"]
    body = doc["paths"]["/v1/profiles"]["post"]["requestBody"]["content"]["application/json"]
    assert body["schema"] == {"$ref": "#/components/schemas/ProfileReport"}
    for name, file in [("ProfileReport", "profile_report"), ("Policy", "policy"),
                       ("RoutingTable", "routing_table")]:  # fmt: skip
        exported = json.loads((SCHEMA_DIR / f"{file}.schema.json").read_text())
        defs = exported.pop("$defs", {})
        rewrite = json.dumps(exported).replace("#/$defs/", "#/components/schemas/")
        assert schemas[name] == json.loads(rewrite), name
        for def_name, definition in defs.items():
            text = json.dumps(definition).replace("#/$defs/", "#/components/schemas/")
            assert schemas[def_name] == json.loads(text), def_name


def test_writes_document_auth_and_errors() -> None:
    doc = build_openapi(CORE_ROUTES, protect_reads=False)
    put = doc["paths"]["/v1/profiles/{pair}"]["put"]
    assert put["security"] == [{"bearerAuth": []}]
    assert {"200", "201", "400", "401", "413", "422", "503"} <= set(put["responses"])
    get = doc["paths"]["/v1/profiles"]["get"]
    assert "security" not in get
    assert "401" not in get["responses"]
    assert "503" not in doc["paths"]["/healthz"]["get"]["responses"]
    assert doc["paths"]["/v1/tables/{version}"]["get"]["parameters"][0]["schema"]["minimum"] == 1


def test_policy_body_schema_rejects_unknown_keys_like_the_api() -> None:
    doc = build_openapi(CORE_ROUTES, protect_reads=False)
    schemas = doc["components"]["schemas"]
    put = doc["paths"]["/v1/policy"]["put"]["requestBody"]["content"]["application/json"]
    assert put["schema"] == {"$ref": "#/components/schemas/PolicyDocument"}
    strict = schemas["PolicyDocument"]
    assert strict["additionalProperties"] is False
    assert strict["properties"]["latency_quantile"]["enum"] == [0.5, 0.9, 0.95, 0.99]
    nested = strict["properties"]["categories"]
    assert nested["additionalProperties"] is False
    ref = next(iter(nested["patternProperties"].values()))["$ref"]
    assert ref == "#/components/schemas/StrictCategoryPolicy"
    assert schemas["StrictCategoryPolicy"]["additionalProperties"] is False
    assert "additionalProperties" not in schemas["Policy"]  # the contract itself stays open
