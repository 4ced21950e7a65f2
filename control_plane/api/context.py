"""What admin-API handlers share: app keys, the route description, and body helpers.

Routes are data (`ApiRoute`): `app.py` registers them and `openapi.py` documents the same
list, so the document cannot drift from what is served. More routes (e.g. the operator page)
come in through `AppDeps.extra_routes`.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiohttp import web
from pydantic import BaseModel, ValidationError

from contracts.names import FAMILY_PATTERN, QUANT_PATTERN
from control_plane.api.errors import bad_request
from control_plane.build.documents import DocumentError, check_strict_types, parse_json, problems_of
from control_plane.runtime.metrics import ControlPlaneMetrics
from control_plane.runtime.services import Services
from control_plane.settings import ControlPlaneSettings

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
ModelT = TypeVar("ModelT", bound=BaseModel)
PAIR_PATTERN = f"{FAMILY_PATTERN.rstrip('$')}@{QUANT_PATTERN.lstrip('^')}"
_PAIR_RE = re.compile(PAIR_PATTERN)
_VERSION_RE = re.compile(r"^[0-9]{1,15}$")


@dataclass(frozen=True, slots=True)
class ResponseDoc:
    description: str
    schema: str | None = None  # a components/schemas name; None = no body
    media_type: str = "application/json"
    headers: Mapping[str, str] = field(default_factory=dict)  # name -> description


@dataclass(frozen=True, slots=True)
class ApiRoute:
    """One operation. Standard error answers are added to its documentation by flag."""

    method: str
    path: str
    name: str  # operationId, and the `route` label of gearbox_cp_admin_requests_total
    handler: Handler
    summary: str
    responses: Mapping[int, ResponseDoc]
    write: bool = False  # needs the admin token
    public: bool = False  # never needs a token (probes, metrics, the OpenAPI document)
    uses_redis: bool = True  # may answer 503 when Redis is down
    body: str | None = None  # components/schemas name of the JSON request body
    path_params: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


SETTINGS_KEY = web.AppKey("cp_settings", ControlPlaneSettings)
METRICS_KEY = web.AppKey("cp_metrics", ControlPlaneMetrics)
SERVICES_KEY = web.AppKey("cp_services", Services)
ROUTES_KEY = web.AppKey("cp_routes", dict[str, ApiRoute])
OPENAPI_KEY = web.AppKey("cp_openapi", dict[str, Any])


def json_response(
    body: BaseModel, status: int = 200, headers: Mapping[str, str] | None = None
) -> web.Response:
    return web.Response(
        body=body.model_dump_json().encode(),
        status=status,
        content_type="application/json",
        headers=headers,
    )


async def read_json(request: web.Request) -> Any:
    """The request body as JSON (413 past the size limit, 400 when not JSON)."""
    return parse_json(await request.read(), "body")


async def read_document(request: web.Request, model: type[BaseModel]) -> Any:
    """The body as JSON whose values have `model`'s JSON types exactly (no lax coercion)."""
    data = await read_json(request)
    check_strict_types(model, data, "body")
    return data


async def read_model(request: web.Request, model: type[ModelT]) -> ModelT:
    data = await read_document(request, model)
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise DocumentError("body", problems_of(err), "invalid_field") from err


def path_pair(request: web.Request) -> str:
    pair = request.match_info["pair"]
    if not _PAIR_RE.fullmatch(pair):
        raise bad_request(f"pair {pair!r} is not family@quantization", "pair")
    return pair


def path_version(request: web.Request) -> int:
    text = request.match_info["version"]
    if not _VERSION_RE.fullmatch(text) or int(text) < 1:
        raise bad_request(f"version {text!r} is not a positive integer", "version")
    return int(text)


PAIR_PARAM: Mapping[str, Any] = {"type": "string", "pattern": PAIR_PATTERN}
VERSION_PARAM: Mapping[str, Any] = {"type": "integer", "minimum": 1, "maximum": 10**15 - 1}
