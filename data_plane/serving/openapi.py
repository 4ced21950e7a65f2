"""The OpenAPI 3.1 document the data plane serves at /openapi.json, generated from its route
table (`Handlers.routes()`), the request models (`data_plane.request.body`) and the answer
models (`data_plane.serving.api_models`). A served route without an entry in `OPERATIONS`
fails the build, so the document cannot fall behind the routes.

When a table is loaded, `model` lists its ids (`auto`, families, pairs) as known values; any
other string stays valid input (it answers 404 `model_not_found`).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from contracts.budget_headers import (
    ACCURACY_HEADER,
    CATEGORY_HEADER,
    COST_HEADER,
    LATENCY_HEADER,
    MODE_HEADER,
    TTFT_HEADER,
)
from data_plane.domain import RouteReason
from data_plane.request.body import REQUEST_MODELS
from data_plane.request.identity import PRIORITY_APPLIED, TENANT_APPLIED
from data_plane.request.priority import PRIORITY_HEADER
from data_plane.serving.api_models import RESPONSE_MODELS

REF = "#/components/schemas/{model}"
_PARAM = re.compile(r"\{(\w+)(?::[^}]+)?\}")
_HEADER_WORDS = {
    LATENCY_HEADER: "end-to-end budget for the whole response, milliseconds",
    TTFT_HEADER: "budget for the first token of a stream, milliseconds",
    ACCURACY_HEADER: "accuracy floor in [0, 1] on the request's category",
    COST_HEADER: "cost ceiling for this request, USD",
    MODE_HEADER: "best-effort (default) or strict",
    CATEGORY_HEADER: "overrides the classifier's category",
    PRIORITY_HEADER: "a priority class of the policy; one above the request's default class "
    "counts only with the right to it (the API key's grant, a trusted gateway), else the "
    "default class applies (X-Gearbox-Priority says which)",
    "x-gearbox-tenant": "the tenant (the ADMISSION_TENANT_HEADER setting names it; 1-256 bytes of "
    "printable text); ignored for an API key that names its own tenant",
    "X-Request-Id": "echoed back; a fresh id when absent or unsafe",
}
_APPLIED = {
    PRIORITY_APPLIED: "the priority class the request was served or judged as",
    TENANT_APPLIED: "its tenant's metric label: the id, t- + a hash of it, or other",
}
_ROUTE_HEADERS = {
    "X-Route-Pair": "the pair that answered (family@quantization)",
    "X-Route-Reason": "why: " + ", ".join(r.value for r in RouteReason),
    "X-Route-Table-Version": "the routing table version",
    "X-Route-Predicted-Latency-Ms": "the table's prediction for this request",
    "X-Route-Estimated-Cost-Usd": "the table's cost estimate for this request",
    "X-Route-Attempts": "engine attempts made",
    "X-Request-Id": "this request's id",
    **_APPLIED,
}
_RETRY_AFTER = {"Retry-After": "seconds until a retry may succeed"}
_NO_RETRY = {"x-should-retry": "false: the router already retried the engines"}


@dataclass(frozen=True, slots=True)
class Reply:
    description: str
    schema: str | None = "ErrorEnvelope"  # components/schemas name; None: no JSON body
    media_type: str = "application/json"
    headers: Mapping[str, str] | None = None
    stream: bool = False  # also text/event-stream (a streamed answer)


@dataclass(frozen=True, slots=True)
class Operation:
    summary: str
    replies: Mapping[int, Reply]
    body: tuple[str, ...] = ()  # request schemas (anyOf when several)
    budget_headers: bool = False


_BAD_INPUT = {
    400: Reply("invalid JSON, a bad field or budget header (param names it), an infeasible "
               "strict budget, or a request longer than every context (context_length_exceeded)"),
    408: Reply("the body did not arrive in time"),
    413: Reply("the body is larger than the limit"),
}  # fmt: skip
_NO_TABLE = Reply("no routing table is loaded yet, or no healthy engine", headers=_RETRY_AFTER)


def _completion_replies(answer: str) -> dict[int, Reply]:
    return {
        200: Reply("the engine's answer, or an SSE stream when stream is true", answer,
                   headers=_ROUTE_HEADERS, stream=True),
        **_BAD_INPUT,
        404: Reply("unknown model (no pair serves it)"),
        429: Reply("shed by admission, or every engine tried was overloaded",
                   headers={**_RETRY_AFTER, **_APPLIED}),
        502: Reply("the engines failed", headers=_NO_RETRY),
        503: Reply("no engine could be reached (x-should-retry: false after engine attempts)",
                   headers={**_RETRY_AFTER, **_NO_RETRY}),
        504: Reply("the latency budget ran out", headers=_NO_RETRY),
    }  # fmt: skip


OPERATIONS: dict[str, Operation] = {
    "chat_completions": Operation(
        "OpenAI chat completions, routed by the budget headers",
        _completion_replies("ChatCompletion"),
        body=("ChatRequest",),
        budget_headers=True,
    ),
    "completions": Operation(
        "OpenAI completions, routed by the budget headers",
        _completion_replies("Completion"),
        body=("CompletionRequest",),
        budget_headers=True,
    ),
    "route": Operation(
        "The routing decision for this body and these headers, explained; no engine is called",
        {
            200: Reply("the decision (routed: false when nothing is feasible)", "RouteExplanation"),
            **_BAD_INPUT,
            503: _NO_TABLE,
        },
        body=("ChatRequest", "CompletionRequest"),
        budget_headers=True,
    ),
    "models": Operation(
        "auto, every family and every pair (OpenAI's model list)",
        {200: Reply("the model list", "ModelList"), 503: _NO_TABLE},
    ),
    "model": Operation(
        "One model object (the SDK's models.retrieve)",
        {200: Reply("the model", "ModelObject"), 404: Reply("unknown model"), 503: _NO_TABLE},
    ),
    "healthz": Operation("Liveness", {200: Reply("alive", "Health")}),
    "readyz": Operation(
        "Readiness: a routing table is loaded",
        {200: Reply("ready", "Readiness"), 503: Reply("no table yet", "Readiness")},
    ),
    "metrics": Operation(
        "Prometheus metrics (docs/METRICS.md)",
        {
            200: Reply("Prometheus text format", None, media_type="text/plain"),
            401: Reply("SERVER_METRICS_TOKEN is set and the bearer token is missing or wrong"),
        },
    ),
    "openapi": Operation("This document", {200: Reply("OpenAPI 3.1", "OpenApiDocument")}),
}


def _schemas() -> dict[str, Any]:
    models: list[type[BaseModel]] = [*REQUEST_MODELS.values(), *RESPONSE_MODELS]
    _, top = models_json_schema([(m, "validation") for m in models], ref_template=REF)
    defs: dict[str, Any] = top["$defs"]
    for name, model in REQUEST_MODELS.items():  # public names for the private models
        defs[name] = defs.pop(model.__name__)
    return defs


def _reply(reply: Reply) -> dict[str, Any]:
    out: dict[str, Any] = {"description": reply.description}
    schema = (
        {"type": "string"} if reply.schema is None else {"$ref": REF.format(model=reply.schema)}
    )
    content = {reply.media_type: {"schema": schema}}
    if reply.stream:
        content["text/event-stream"] = {"schema": {"type": "string"}}
    out["content"] = content
    if reply.headers:
        out["headers"] = {
            name: {"description": words, "schema": {"type": "string"}}
            for name, words in reply.headers.items()
        }
    return out


def _parameters(path: str, op: Operation) -> list[dict[str, Any]]:
    params = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string", "minLength": 1}}
        for name in _PARAM.findall(path)
    ]
    if op.budget_headers:
        params += [
            {"name": name, "in": "header", "required": False, "description": words,
             "schema": {"type": "string"}}
            for name, words in _HEADER_WORDS.items()
        ]  # fmt: skip
    return params


def _operation(route: web.RouteDef, op: Operation) -> dict[str, Any]:
    replies = dict(op.replies)
    protected = route.path.startswith("/v1/")
    if protected:
        replies[401] = Reply("missing or invalid API key (when keys are configured)")
    doc: dict[str, Any] = {
        "operationId": route.kwargs["name"],
        "summary": op.summary,
        "responses": {str(code): _reply(r) for code, r in sorted(replies.items())},
    }
    params = _parameters(route.path, op)
    if params:
        doc["parameters"] = params
    if op.body:
        refs = [{"$ref": REF.format(model=name)} for name in op.body]
        schema = refs[0] if len(refs) == 1 else {"anyOf": refs}
        doc["requestBody"] = {"required": True, "content": {"application/json": {"schema": schema}}}
    if protected:
        doc["security"] = [{"apiKey": []}, {}]
    return doc


def build_openapi(routes: Sequence[web.RouteDef], version: str) -> dict[str, Any]:
    """The document for these routes, of this Gearbox `version`; KeyError names a route
    without an `OPERATIONS` entry."""
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        name = route.kwargs["name"]
        if name not in OPERATIONS:
            raise KeyError(f"route {name!r} ({route.method} {route.path}) is not documented")
        path = _PARAM.sub(r"{\1}", route.path)
        paths.setdefault(path, {})[route.method.lower()] = _operation(route, OPERATIONS[name])
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Gearbox data plane",
            "version": version,
            "description": "OpenAI-compatible routing API (README.md, docs/data_plane.md).",
        },
        "paths": paths,
        "components": {
            "schemas": _schemas(),
            "securitySchemes": {
                "apiKey": {"type": "http", "scheme": "bearer",
                           "description": "only when GEARBOX_DP_SERVER_API_KEYS is set"},
            },
        },
    }  # fmt: skip


def with_models(doc: Mapping[str, Any], model_ids: Sequence[str]) -> dict[str, Any]:
    """`doc` with the loaded table's model ids as the known values of every `model`."""
    out = copy.deepcopy(dict(doc))
    known = {"anyOf": [{"enum": list(model_ids)}, {"type": "string", "minLength": 1}]}
    schemas = out["components"]["schemas"]
    for name in REQUEST_MODELS:
        schemas[name]["properties"]["model"] = {
            "anyOf": [{"enum": list(model_ids)}, schemas[name]["properties"]["model"]]
        }
    for operation in out["paths"].get("/v1/models/{model}", {}).values():
        for param in operation.get("parameters", []):
            if param["name"] == "model":
                param["schema"] = known
    return out
