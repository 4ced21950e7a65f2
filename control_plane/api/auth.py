"""Admin API: an authenticated no-op, so a tool that will write later (the profiler's
`--push`) can check the URL and the token before its long work, not after it."""

from __future__ import annotations

from aiohttp import web

from control_plane.api.context import ApiRoute, ResponseDoc, json_response
from control_plane.api.models import Health


async def auth_check(request: web.Request) -> web.Response:
    """Reached only with the admin token (it is a write route); changes nothing."""
    return json_response(Health(status="ok"))


ROUTES: tuple[ApiRoute, ...] = (
    ApiRoute(
        "POST",
        "/v1/auth/check",
        "auth_check",
        auth_check,
        "Check the admin token; changes nothing",
        {200: ResponseDoc("the token is accepted", "Health")},
        write=True,
        uses_redis=False,
    ),
)
