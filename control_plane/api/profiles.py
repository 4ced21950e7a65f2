"""Admin API: profile reports (`/v1/profiles`). Thin handlers: parse, call the store, render."""

from __future__ import annotations

from aiohttp import web

from contracts.profile_report import ProfileReport
from control_plane.api.context import (
    PAIR_PARAM,
    SERVICES_KEY,
    SETTINGS_KEY,
    ApiRoute,
    ResponseDoc,
    json_response,
    path_pair,
    read_document,
)
from control_plane.api.errors import ApiError, bad_request, not_found
from control_plane.api.models import ProfileList, ProfileStored, ProfileSummary
from control_plane.build.documents import parse_report
from control_plane.build.table import report_sha256
from control_plane.store.profile_store import StoredProfile


async def _store(request: web.Request, report: ProfileReport) -> web.Response:
    if report.provenance.partial and not request.app[SETTINGS_KEY].build.allow_partial:
        raise ApiError(
            422,
            "invalid_request_error",
            "partial_report",
            f"report {report.pair}: provenance.partial is true (the profiling run was "
            "interrupted); re-profile the pair (this control plane rejects partial reports)",
            "provenance.partial",
        )
    created = await request.app[SERVICES_KEY].profiles.put(report)
    body = ProfileStored(pair=report.pair, created=created, report_sha256=report_sha256(report))
    return json_response(body, status=201 if created else 200)


async def post_profile(request: web.Request) -> web.Response:
    report = parse_report(await read_document(request, ProfileReport), "body")
    return await _store(request, report)


async def put_profile(request: web.Request) -> web.Response:
    pair = path_pair(request)
    report = parse_report(await read_document(request, ProfileReport), "body")
    if report.pair != pair:
        raise bad_request(
            f"the body is the report of {report.pair!r}, not of {pair!r} (the path's pair)",
            "pair",
            "pair_mismatch",
        )
    return await _store(request, report)


async def get_profile(request: web.Request) -> web.Response:
    pair = path_pair(request)
    report = await request.app[SERVICES_KEY].profiles.get(pair)
    if report is None:
        raise not_found(f"no profile stored for {pair!r}", "profile_not_found")
    return json_response(report)


async def delete_profile(request: web.Request) -> web.Response:
    pair = path_pair(request)
    if not await request.app[SERVICES_KEY].profiles.delete(pair):
        raise not_found(f"no profile stored for {pair!r}", "profile_not_found")
    return web.Response(status=204)


def _summary(stored: StoredProfile) -> ProfileSummary:
    report = stored.report
    if report is None:
        return ProfileSummary(pair=stored.pair, valid=False, problem=stored.problem)
    return ProfileSummary(
        pair=stored.pair,
        valid=True,
        report_sha256=report_sha256(report),
        hardware=report.hardware.name,
        finished_at=report.provenance.finished_at,
        partial=report.provenance.partial,
    )


async def list_profiles(request: web.Request) -> web.Response:
    stored = await request.app[SERVICES_KEY].profiles.all()
    return json_response(ProfileList(profiles=[_summary(s) for s in stored]))


_STORED = {
    200: ResponseDoc("replaced the stored report of the pair", "ProfileStored"),
    201: ResponseDoc("stored the report of a new pair", "ProfileStored"),
    422: ResponseDoc("the report is partial (provenance.partial)", "ErrorEnvelope"),
}
_PAIR = {"pair": PAIR_PARAM}
_MISSING = ResponseDoc("no profile stored for the pair", "ErrorEnvelope")
_INVALID_STORED = ResponseDoc("the stored report no longer validates", "ErrorEnvelope")

ROUTES: tuple[ApiRoute, ...] = (
    ApiRoute(
        "GET",
        "/v1/profiles",
        "list_profiles",
        list_profiles,
        "List stored profile reports",
        {200: ResponseDoc("stored reports, sorted by pair", "ProfileList")},
    ),
    ApiRoute(
        "POST",
        "/v1/profiles",
        "post_profile",
        post_profile,
        "Store a profile report (the pair comes from the report)",
        _STORED,
        write=True,
        body="ProfileReport",
    ),
    ApiRoute(
        "GET",
        "/v1/profiles/{pair}",
        "get_profile",
        get_profile,
        "Get the stored report of a pair",
        {200: ResponseDoc("the report", "ProfileReport"), 404: _MISSING, 409: _INVALID_STORED},
        path_params=_PAIR,
    ),
    ApiRoute(
        "PUT",
        "/v1/profiles/{pair}",
        "put_profile",
        put_profile,
        "Store the report of a pair (the body's family@quantization must match)",
        _STORED,
        write=True,
        body="ProfileReport",
        path_params=_PAIR,
    ),
    ApiRoute(
        "DELETE",
        "/v1/profiles/{pair}",
        "delete_profile",
        delete_profile,
        "Delete the stored report of a pair (tables change only when rebuilt)",
        {204: ResponseDoc("deleted"), 404: _MISSING},
        write=True,
        path_params=_PAIR,
    ),
)
