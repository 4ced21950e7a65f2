"""Admin API: the routing policy (`/v1/policy`). PUT stores it in Redis; it applies from the
next rebuild (`POST /v1/tables`), never to the table already published."""

from __future__ import annotations

from aiohttp import web

from contracts.policy import Policy
from control_plane.api.context import (
    SERVICES_KEY,
    ApiRoute,
    ResponseDoc,
    json_response,
    read_document,
)
from control_plane.build.documents import parse_policy

SOURCE_HEADER = "X-Gearbox-Policy-Source"
_SOURCE_DOC = {SOURCE_HEADER: "where the policy comes from: redis, file or default"}


async def get_policy(request: web.Request) -> web.Response:
    effective = await request.app[SERVICES_KEY].policies.get()
    return json_response(effective.policy, headers={SOURCE_HEADER: effective.source})


async def put_policy(request: web.Request) -> web.Response:
    policy = parse_policy(await read_document(request, Policy), "body")
    await request.app[SERVICES_KEY].policies.put(policy)
    return json_response(policy, headers={SOURCE_HEADER: "redis"})


ROUTES: tuple[ApiRoute, ...] = (
    ApiRoute(
        "GET",
        "/v1/policy",
        "get_policy",
        get_policy,
        "The policy the next table will be built with",
        {
            200: ResponseDoc("the effective policy", "Policy", headers=_SOURCE_DOC),
            409: ResponseDoc("the stored policy does not validate", "ErrorEnvelope"),
        },
    ),
    ApiRoute(
        "PUT",
        "/v1/policy",
        "put_policy",
        put_policy,
        "Store the policy (unknown keys are rejected); rebuild to apply it",
        {200: ResponseDoc("stored", "Policy", headers=_SOURCE_DOC)},
        write=True,
        body="PolicyDocument",
    ),
)
