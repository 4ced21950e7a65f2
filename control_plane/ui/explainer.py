"""The operator page's decision explainer: `POST /ui/api/route` forwards to a data plane.

Adapter. The control plane never imports the data plane, so it forwards the body byte-for-byte
and the budget headers to `{GEARBOX_CP_DATA_PLANE_URL}/v1/route` and passes the JSON answer
(decision or error envelope) back with its status. It never follows redirects and never shows
the data plane's URL to the browser.

It needs the admin token whatever `protect_reads` says: it makes the control plane send
requests to another service (with the data plane API key it is given), which an anonymous
caller must not be able to do (docs/operator_page.md, "Routes"). Its calls share one client
session for the app's lifetime (`client_ctx`), at most `MAX_CONNECTIONS` connections to the data
plane, kept alive between clicks.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web

from contracts.budget_headers import BUDGET_HEADERS
from control_plane.api.context import SETTINGS_KEY, ApiRoute, ResponseDoc
from control_plane.api.errors import ApiError

# Request headers the data plane reads for a decision (docs/design.md, "Request contract"),
# forwarded as given.
FORWARDED_HEADERS = (*BUDGET_HEADERS, "X-Request-Id")
# The data plane's API key, if it wants one, comes in its own header: `Authorization` belongs
# to the control plane's admin token.
API_KEY_HEADER = "X-Gearbox-Api-Key"
MAX_ANSWER_BYTES = 1024 * 1024
CONNECT_TIMEOUT_S = 2.0
TOTAL_TIMEOUT_S = 10.0  # includes waiting for one of the MAX_CONNECTIONS
MAX_CONNECTIONS = 4
CLIENT_KEY = web.AppKey("cp_explainer_client", aiohttp.ClientSession)


async def client_ctx(app: web.Application) -> AsyncIterator[None]:
    """The explainer's client session, opened with the app and closed with it."""
    timeout = aiohttp.ClientTimeout(
        total=TOTAL_TIMEOUT_S, sock_connect=CONNECT_TIMEOUT_S, sock_read=TOTAL_TIMEOUT_S
    )
    connector = aiohttp.TCPConnector(limit=MAX_CONNECTIONS)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        app[CLIENT_KEY] = session
        yield


def _upstream_error(status: int, code: str, message: str) -> ApiError:
    return ApiError(status, "server_error", code, message)


def _forwarded_headers(request: web.Request) -> dict[str, str]:
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    for name in FORWARDED_HEADERS:
        value = request.headers.get(name)
        if value is not None:
            headers[name] = value
    key = request.headers.get(API_KEY_HEADER, "").strip()
    if key:
        headers["Authorization"] = f"Bearer {key}"
    return headers


async def _ask(
    session: aiohttp.ClientSession, url: str, body: bytes, headers: dict[str, str]
) -> tuple[int, str, bytes]:
    """(status, content type, body) of the data plane's answer; bounded in time and size."""
    async with session.post(url, data=body, headers=headers, allow_redirects=False) as resp:
        payload = await resp.content.read(MAX_ANSWER_BYTES + 1)
        return resp.status, resp.content_type, payload


async def explain_route(request: web.Request) -> web.Response:
    """The data plane's `/v1/route` answer for this body and these budget headers."""
    base = request.app[SETTINGS_KEY].data_plane_url
    if not base:
        raise _upstream_error(
            503,
            "data_plane_not_configured",
            "the explainer needs a data plane: set GEARBOX_CP_DATA_PLANE_URL",
        )
    body = await request.read()
    try:
        status, content_type, payload = await _ask(
            request.app[CLIENT_KEY],
            f"{base.rstrip('/')}/v1/route",
            body,
            _forwarded_headers(request),
        )
    except TimeoutError as err:
        raise _upstream_error(
            504, "data_plane_timeout", f"the data plane did not answer in {TOTAL_TIMEOUT_S:g} s"
        ) from err
    except (aiohttp.ClientError, OSError) as err:
        raise _upstream_error(
            502, "data_plane_unreachable", f"the data plane is unreachable ({type(err).__name__})"
        ) from err
    if content_type != "application/json" or len(payload) > MAX_ANSWER_BYTES:
        raise _upstream_error(
            502,
            "data_plane_bad_answer",
            f"the data plane answered {status} with {content_type or 'no content type'} "
            f"({len(payload)} bytes); expected a JSON document under {MAX_ANSWER_BYTES} bytes",
        )
    return web.Response(body=payload, status=status, content_type="application/json")


_ERROR = "ErrorEnvelope"

ROUTES: tuple[ApiRoute, ...] = (
    ApiRoute(
        "POST",
        "/ui/api/route",
        "ui_route",
        explain_route,
        "The decision explainer: a data plane's /v1/route answer for this body and headers",
        {
            200: ResponseDoc("the data plane's decision, explained (see docs/operator_page.md)"),
            400: ResponseDoc("the data plane rejected the body or a budget header", _ERROR),
            502: ResponseDoc("the data plane is unreachable or answered garbage", _ERROR),
            503: ResponseDoc("no data plane is configured, or it has no table yet", _ERROR),
            504: ResponseDoc("the data plane did not answer in time", _ERROR),
        },
        write=True,  # the admin token, always: it calls another service (see the docstring)
        uses_redis=False,
    ),
)
