"""The OpenAPI 3.1 document of the admin API, generated from the served `ApiRoute`s.

Request and response schemas come from the same pydantic models as the exported contract
schemas (contracts/schemas/), placed under components/schemas. Standard error answers are
added from each route's flags, so every documented status is one the route can really send.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from contracts.policy import MEASURED_QUANTILES, Policy
from contracts.profile_report import ProfileReport
from contracts.routing_table import RoutingTable
from control_plane.api.context import ApiRoute, ResponseDoc
from control_plane.api.models import (
    ClassifierReport,
    ErrorEnvelope,
    Health,
    ProfileList,
    ProfileStored,
    PublishResponse,
    Readiness,
    RollbackRequest,
    RollbackResponse,
    TableHistory,
)
from control_plane.runtime.metrics import package_version

SCHEMA_MODELS: tuple[type[BaseModel], ...] = (
    ProfileReport,
    RoutingTable,
    Policy,
    ErrorEnvelope,
    ProfileList,
    ProfileStored,
    PublishResponse,
    TableHistory,
    RollbackRequest,
    RollbackResponse,
    Health,
    Readiness,
    ClassifierReport,
)
REF = "#/components/schemas/{model}"
_ERROR = "ErrorEnvelope"
_STANDARD: dict[str, ResponseDoc] = {
    "body": ResponseDoc("invalid JSON, or a field is invalid (param names it)", _ERROR),
    "size": ResponseDoc("the body is larger than the configured limit", _ERROR),
    "path": ResponseDoc("a path parameter is malformed", _ERROR),
    "auth": ResponseDoc(
        "missing or invalid bearer token",
        _ERROR,
        headers={"WWW-Authenticate": "the Bearer challenge"},
    ),
    "redis": ResponseDoc(
        "Redis is unavailable", _ERROR, headers={"Retry-After": "seconds to wait"}
    ),
}


def _closed(schema: Any) -> Any:
    """Every object in `schema` rejects keys it does not declare; quantiles list their values."""
    if isinstance(schema, list):
        return [_closed(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: _closed(value) for key, value in schema.items()}
    if out.get("type") == "object" and ("properties" in out or "patternProperties" in out):
        out["additionalProperties"] = False
    quantile = out.get("properties", {}).get("latency_quantile")
    if isinstance(quantile, dict):
        quantile["enum"] = list(MEASURED_QUANTILES)
    return out


def _strict_copies(schemas: dict[str, Any], root: str, prefix: str) -> dict[str, Any]:
    """`root` and the objects it references, renamed with `prefix`, rejecting unknown keys:
    the shape of a human-written document (e.g. a policy), where a typo must fail."""
    pending, copies = [root], {}
    while pending:
        name = pending.pop()
        text = json.dumps(schemas[name])
        for ref in set(re.findall(r'"#/components/schemas/([A-Za-z0-9_]+)"', text)):
            if f"{prefix}{ref}" not in copies and ref not in pending:
                pending.append(ref)
            text = text.replace(REF.format(model=ref) + '"', REF.format(model=prefix + ref) + '"')
        copies[f"{prefix}{name}"] = _closed(json.loads(text))
    return copies


def component_schemas() -> dict[str, Any]:
    _, top = models_json_schema([(m, "validation") for m in SCHEMA_MODELS], ref_template=REF)
    schemas: dict[str, Any] = dict(top["$defs"])
    strict = _strict_copies(schemas, "Policy", "Strict")
    schemas["PolicyDocument"] = strict.pop("StrictPolicy")
    schemas.update(strict)
    schemas["MetricsText"] = {"type": "string", "description": "Prometheus text format 0.0.4"}
    schemas["OpenApiDocument"] = {"type": "object"}
    return schemas


def _response(doc: ResponseDoc) -> dict[str, Any]:
    out: dict[str, Any] = {"description": doc.description}
    if doc.schema is not None:
        out["content"] = {doc.media_type: {"schema": {"$ref": REF.format(model=doc.schema)}}}
    if doc.headers:
        out["headers"] = {
            name: {"description": text, "schema": {"type": "string"}}
            for name, text in doc.headers.items()
        }
    return out


def _standard_responses(route: ApiRoute, needs_token: bool) -> dict[int, ResponseDoc]:
    extra: dict[int, ResponseDoc] = {}
    if route.path_params:
        extra[400] = _STANDARD["path"]
    if route.body:
        extra[400] = _STANDARD["body"]
        extra[413] = _STANDARD["size"]
    if needs_token:
        extra[401] = _STANDARD["auth"]
    if route.uses_redis:
        extra[503] = _STANDARD["redis"]
    return extra


def _operation(route: ApiRoute, needs_token: bool) -> dict[str, Any]:
    responses = {**_standard_responses(route, needs_token), **route.responses}
    op: dict[str, Any] = {
        "operationId": route.name,
        "summary": route.summary,
        "responses": {str(code): _response(doc) for code, doc in sorted(responses.items())},
    }
    if route.path_params:
        op["parameters"] = [
            {"name": name, "in": "path", "required": True, "schema": dict(schema)}
            for name, schema in route.path_params.items()
        ]
    if route.body:
        op["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": REF.format(model=route.body)}}},
        }
    if needs_token:
        op["security"] = [{"bearerAuth": []}]
    return op


def doc_path(path: str) -> str:
    """The OpenAPI spelling of an aiohttp path: `{version:\\d+}` -> `{version}`."""
    return re.sub(r"\{(\w+):[^}]+\}", r"{\1}", path)


def needs_token(route: ApiRoute, protect_reads: bool) -> bool:
    return not route.public and (route.write or protect_reads)


def build_openapi(routes: Sequence[ApiRoute], protect_reads: bool) -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        operation = _operation(route, needs_token(route, protect_reads))
        paths.setdefault(doc_path(route.path), {})[route.method.lower()] = operation
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Gearbox control plane admin API",
            "version": package_version(),
            "description": "Profiles in, routing tables out. Writes need the admin bearer token.",
        },
        "paths": paths,
        "components": {
            "schemas": component_schemas(),
            "securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer"}},
        },
    }
