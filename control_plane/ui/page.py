"""The operator page: `GET /` and `/ui` (plain HTML/CSS/JS from `static/`) and the JSON it reads.

Adapter over the published tables, the stored profiles and the data planes' live states in
Redis. Read-only: writes (rollback) go to the admin API with the operator's token. The page
loads nothing from outside this server (a strict Content-Security-Policy says so too).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from contracts.live_state import DataPlaneState
from contracts.profile_report import ProfileReport
from contracts.redis_keys import RedisKeys
from contracts.routing_table import RoutingTable
from control_plane.api.context import (
    SERVICES_KEY,
    SETTINGS_KEY,
    ApiRoute,
    Handler,
    ResponseDoc,
    json_response,
)
from control_plane.api.errors import bad_request, not_found
from control_plane.api.models import TableVersionSummary
from control_plane.build.fitting import fit_latency_model
from control_plane.build.pricing import price_pair
from control_plane.build.scoring import PairFigures
from control_plane.build.table import report_sha256
from control_plane.runtime.services import Services
from control_plane.store.stored_data import StoredDataError
from control_plane.ui import explainer
from control_plane.ui.live import LiveView, merge_live_states
from control_plane.ui.loop import evidence_handler, loop_handler
from control_plane.ui.view import TableView, pruned_sources, table_view

STATIC_DIR = Path(__file__).resolve().parent / "static"
ASSETS: Mapping[str, str] = {
    "app.js": "text/javascript",
    "chart.js": "text/javascript",
    "style.css": "text/css",
}
# Everything comes from this origin; nothing inline, nothing from the internet.
SECURITY_HEADERS: Mapping[str, str] = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
MAX_LIVE_INSTANCES = 1000
_VERSION_RE = re.compile(r"^[0-9]{1,15}$")
Clock = Callable[[], datetime]


class Overview(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    current_version: int | None
    table: TableView | None = Field(description="the shown version; None before any publish")
    history: list[TableVersionSummary] = Field(description="kept versions, newest first")
    explainer: bool = Field(description="a data plane URL is configured for /ui/api/route")
    protect_reads: bool = Field(description="reads need the admin token too")


def _file(name: str, content_type: str) -> web.FileResponse:
    return web.FileResponse(
        STATIC_DIR / name, headers={"Content-Type": content_type, **SECURITY_HEADERS}
    )


async def page(request: web.Request) -> web.StreamResponse:
    return _file("index.html", "text/html; charset=utf-8")


async def asset(request: web.Request) -> web.StreamResponse:
    name = request.match_info["name"]
    content_type = ASSETS.get(name)
    if content_type is None:
        raise not_found(f"no asset {name!r}", "asset_not_found")
    return _file(name, f"{content_type}; charset=utf-8")


def _figures(reports: list[ProfileReport], quantile: float) -> dict[str, PairFigures]:
    """Scoring figures of pruned pairs, derived exactly as the table build derives them."""
    figures = {}
    for r in reports:
        prices = price_pair(r)
        figures[r.pair] = PairFigures(
            pair=r.pair,
            family=r.family,
            input_usd_per_mtok=prices.input_usd_per_mtok,
            output_usd_per_mtok=prices.output_usd_per_mtok,
            latency=fit_latency_model(r.latency, quantile),
            accuracy={a.category: a.accuracy for a in r.accuracy},
            context_length=r.context_length,
        )
    return figures


async def _pruned_figures(services: Services, table: RoutingTable) -> dict[str, PairFigures]:
    """Figures of the pruned pairs whose stored profile is still the one the table used."""
    reports = []
    for pair, sha in pruned_sources(table).items():
        try:
            report = await services.profiles.get(pair)
        except StoredDataError:
            continue  # unreadable now: the page lists the pair without figures
        if report is not None and report_sha256(report) == sha:
            reports.append(report)
    if not reports:
        return {}
    # scipy fits: milliseconds per pair, off the event loop.
    return await asyncio.to_thread(_figures, reports, table.policy.latency_quantile)


def _wanted_version(request: web.Request) -> int | None:
    text = request.query.get("version")
    if text is None:
        return None
    if not _VERSION_RE.fullmatch(text) or int(text) < 1:
        raise bad_request(f"version {text!r} is not a positive integer", "version")
    return int(text)


async def overview(request: web.Request) -> web.Response:
    """The current table (or `?version=N`), its view, and the kept versions."""
    services = request.app[SERVICES_KEY]
    wanted = _wanted_version(request)
    table = await (services.tables.current() if wanted is None else services.tables.get(wanted))
    if table is None and wanted is not None:
        raise not_found(
            f"version {wanted} is not stored (never published, or trimmed)", "table_not_found"
        )
    current, versions = await services.tables.history()
    view = None if table is None else table_view(table, await _pruned_figures(services, table))
    settings = request.app[SETTINGS_KEY]
    body = Overview(
        current_version=current,
        table=view,
        history=[TableVersionSummary.model_validate(v, from_attributes=True) for v in versions],
        explainer=bool(settings.data_plane_url),
        protect_reads=settings.server.protect_reads,
    )
    return json_response(body)


async def read_live_states(services: Services, keys: RedisKeys) -> tuple[list[DataPlaneState], int]:
    """(readable states, count of unreadable ones) under the data-plane state keys.

    SCAN, never KEYS; a key that expires between SCAN and MGET is simply absent.
    """
    names: list[bytes | str] = []
    async for key in services.redis.scan_iter(match=keys.data_plane_state_pattern, count=200):
        names.append(key)
        if len(names) >= MAX_LIVE_INSTANCES:
            break
    raws = await services.redis.mget(names) if names else []
    states, unreadable = [], 0
    for raw in raws:
        if raw is None:
            continue
        try:
            states.append(DataPlaneState.model_validate_json(raw))
        except ValidationError:
            unreadable += 1
    return states, unreadable


def _live_handler(clock: Clock) -> Handler:
    async def live(request: web.Request) -> web.Response:
        services = request.app[SERVICES_KEY]
        states, unreadable = await read_live_states(services, request.app[SETTINGS_KEY].redis.keys)
        current = await services.tables.current_version()
        view: LiveView = merge_live_states(states, current, clock(), unreadable)
        return json_response(view)

    return live


def _utc_now() -> datetime:
    return datetime.now(UTC)


_PAGE = ResponseDoc("the operator page", media_type="text/html")
_ERROR = "ErrorEnvelope"


def operator_routes(clock: Clock = _utc_now) -> tuple[ApiRoute, ...]:
    """The page, its assets, its JSON, and the explainer; `clock` dates the live view."""
    return (
        *(
            ApiRoute(
                "GET",
                path,
                name,
                page,
                "The operator page",
                {200: _PAGE},
                public=True,
                uses_redis=False,
            )
            for path, name in (("/", "ui_root"), ("/ui", "ui_page"))
        ),
        ApiRoute(
            "GET",
            "/ui/static/{name}",
            "ui_asset",
            asset,
            "A script or style sheet of the operator page",
            {
                200: ResponseDoc("the file (JavaScript or CSS)"),
                404: ResponseDoc("no such asset", _ERROR),
            },
            public=True,
            uses_redis=False,
            path_params={"name": {"type": "string", "enum": sorted(ASSETS)}},
        ),
        ApiRoute(
            "GET",
            "/ui/api/table",
            "ui_table",
            overview,
            "The operator page's table view: pairs, scores per category, frontier, history",
            {
                200: ResponseDoc("the view (see docs/operator_page.md)"),
                400: ResponseDoc("`version` is not a positive integer", _ERROR),
                404: ResponseDoc("the asked version is not stored", _ERROR),
                409: ResponseDoc("the stored table does not validate", _ERROR),
            },
        ),
        ApiRoute(
            "GET",
            "/ui/api/live",
            "ui_live",
            _live_handler(clock),
            "Breaker and traffic state merged over the data planes' shared live states",
            {200: ResponseDoc("the merged live view (see docs/operator_page.md)")},
        ),
        ApiRoute(
            "GET",
            "/ui/api/loop",
            "ui_loop",
            loop_handler(clock),
            "Latency drift, refit history and live agreement vs profile (the closed loop)",
            {
                200: ResponseDoc("the closed-loop view (see docs/operator_page.md)"),
                409: ResponseDoc("the stored table does not validate", _ERROR),
            },
        ),
        ApiRoute(
            "GET",
            "/v1/evidence",
            "evidence",
            evidence_handler(clock),
            "Provable share of the recent mix and the undecided pairs that would move it",
            {
                200: ResponseDoc("the evidence view (docs/accuracy.md, docs/operator_page.md)"),
                409: ResponseDoc("the stored table does not validate", _ERROR),
            },
        ),
        *explainer.ROUTES,
    )


ROUTES: tuple[ApiRoute, ...] = operator_routes()
