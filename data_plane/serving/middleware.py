"""The one aiohttp middleware: request id, API keys, server span, error envelope, metrics.

RouterError -> `to_openai_error()`; aiohttp's HTTP errors (404, 405, 413) -> the same envelope;
anything else -> a generic 500, logged once with its traceback. Every response carries
X-Request-Id: set here on every response the handler returns unsent, and by the handler itself
on a stream, whose head is sent before it returns (an `on_response_prepare` hook would cost an
awaited signal per response).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import re
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware
from pydantic import SecretStr

from data_plane import errors
from data_plane.serving.lifecycle import Ending, Finish, Request
from data_plane.telemetry.metrics import RequestOutcome, Route
from data_plane.telemetry.tracing import Tracing

logger = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
REQUEST_ID_HEADER = "X-Request-Id"
_REQUEST_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
_PROTECTED_PREFIX = "/v1/"
_ROUTES = {r.value: r for r in Route}


# The one request the middleware creates and ends and the handler serves (`lifecycle`).
REQUEST = web.RequestKey("gearbox_request", Request)


class RequestIds:
    """Fresh request ids: 32 hex characters, a random per-process prefix and a counter, so
    they are unique without a system call per request (they name requests, they are not
    secrets)."""

    __slots__ = ("_next", "_prefix")

    def __init__(self) -> None:
        self._prefix = os.urandom(8).hex()
        self._next = int.from_bytes(os.urandom(4), "big")

    def __call__(self, value: str | None) -> str:
        """The client's X-Request-Id when it is sane (<= 128 safe chars), else a fresh one."""
        if value is not None and _REQUEST_ID.fullmatch(value):
            return value
        self._next += 1
        return f"{self._prefix}{self._next & 0xFFFFFFFFFFFFFFFF:016x}"


def error_response(err: errors.RouterError) -> web.Response:
    mapped = errors.to_openai_error(err)
    return web.json_response(mapped.body, status=mapped.status, headers=dict(mapped.headers))


class NotFound(errors.RouterError):
    status = 404
    error_type = errors.INVALID_REQUEST
    default_code = "not_found"


class MethodNotAllowed(errors.RouterError):
    status = 405
    error_type = errors.INVALID_REQUEST
    default_code = "method_not_allowed"


def _http_error(err: web.HTTPException, request: web.Request) -> errors.RouterError:
    """aiohttp's own 4xx/5xx (unknown path, wrong method, body too large) as a RouterError."""
    if err.status == 413:
        return errors.PayloadTooLarge(f"the request body is too large: {err.text}")
    if err.status == 404:
        return NotFound(f"no such endpoint: {request.method} {request.path[:200]}")
    if err.status == 405:
        return MethodNotAllowed(f"{request.method} is not allowed on {request.path[:200]}")
    if err.status >= 500:
        return errors.Internal()
    return errors.InvalidRequest(err.reason, code="invalid_request")


class ApiKeys:
    """Bearer API keys; an empty set means the API is open. Compared in constant time."""

    def __init__(self, keys: tuple[SecretStr, ...]) -> None:
        self._keys = tuple(k.get_secret_value().encode() for k in keys)

    def check(self, authorization: str | None) -> None:
        if not self._keys:
            return
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise errors.Unauthorized("missing bearer token in the Authorization header")
        given = token.strip().encode(errors="replace")  # undecodable bytes: no 500
        found = False
        for key in self._keys:  # no early exit: every key is compared
            found |= hmac.compare_digest(given, key)
        if not found:
            raise errors.Unauthorized("invalid API key")


def make_gateway(finish: Finish, tracing: Tracing, api_keys: ApiKeys) -> Middleware:
    """The middleware, closed over the door's ending (`lifecycle.Finish`: the app's
    metrics, decision step and queue, and its clock, on which each request starts), tracer
    and keys."""

    request_ids = RequestIds()

    @web.middleware
    async def gateway(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = finish.clock()
        route = _ROUTES.get(request.match_info.route.name or "", Route.OTHER)
        req = Request(request_ids(request.headers.get(REQUEST_ID_HEADER)), route, started)
        request[REQUEST] = req
        ending: Ending | None = None
        with tracing.request_span(request.headers, route.value):
            try:
                response, ending = await _answer(request, handler, req, api_keys)
                if not response.prepared:
                    response.headers[REQUEST_ID_HEADER] = req.id
                return response
            finally:  # answered, failed or cancelled: counted, its hold and slot free
                finish.finish(req, req.outcome if ending is None else ending)

    return gateway


async def _answer(
    request: web.Request, handler: Handler, req: Request, api_keys: ApiKeys
) -> tuple[web.StreamResponse, Ending]:
    """The response and what the request came to (an error: `Finish` maps it)."""
    try:
        if request.path.startswith(_PROTECTED_PREFIX):
            api_keys.check(request.headers.get("Authorization"))
        return await handler(request), req.outcome
    except errors.RouterError as err:
        response = error_response(err)
        if isinstance(err, errors.RequestTimeout):
            # The rest of a stalled body would be drained for keep-alive: close instead.
            response.force_close()
        return response, err
    except web.HTTPException as err:
        if err.status < 400:
            raise
        mapped = _http_error(err, request)
        return error_response(mapped), mapped
    except asyncio.CancelledError:
        req.outcome = RequestOutcome.CANCELLED
        raise
    except Exception:
        logger.exception("unhandled error", extra={"request_id": req.id})
        return error_response(errors.Internal()), RequestOutcome.INTERNAL_ERROR
