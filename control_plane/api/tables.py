"""Admin API: routing tables (`/v1/tables`): rebuild and publish, read, history, rollback."""

from __future__ import annotations

from aiohttp import web
from redis.exceptions import RedisError

from control_plane.api.classifier_report import classifier_report
from control_plane.api.context import (
    METRICS_KEY,
    SERVICES_KEY,
    VERSION_PARAM,
    ApiRoute,
    ResponseDoc,
    json_response,
    path_version,
    read_model,
)
from control_plane.api.errors import not_found
from control_plane.api.models import (
    PublishResponse,
    RollbackRequest,
    RollbackResponse,
    TableHistory,
    TableVersionSummary,
)
from control_plane.build.table import BuildError
from control_plane.store.publisher import PublishError, PublishOutcome
from control_plane.store.stored_data import StoredDataError


async def post_tables(request: web.Request) -> web.Response:
    metrics = request.app[METRICS_KEY]
    try:
        made = await request.app[SERVICES_KEY].table_service.rebuild()
    except (BuildError, StoredDataError):  # the inputs cannot make a table
        metrics.count_publish(PublishOutcome.REJECTED)
        raise
    except (PublishError, RedisError):
        metrics.count_publish(PublishOutcome.FAILED)
        raise
    result = made.publish
    metrics.count_publish(result.outcome)
    metrics.published_version.set(result.version)
    if result.outcome is PublishOutcome.PUBLISHED:
        metrics.last_publish.set_to_current_time()
    body = PublishResponse(
        outcome="published" if result.outcome is PublishOutcome.PUBLISHED else "unchanged",
        version=result.version,
        previous_version=result.previous_version,
        content_sha256=result.content_sha256,
        entries=made.entries,
        pruned=list(made.pruned),
        warnings=list(made.warnings),
    )
    return json_response(body, status=201 if result.outcome is PublishOutcome.PUBLISHED else 200)


async def get_current(request: web.Request) -> web.Response:
    table = await request.app[SERVICES_KEY].tables.current()
    if table is None:
        raise not_found("no table has been published yet", "table_not_found")
    return json_response(table)


async def get_version(request: web.Request) -> web.Response:
    version = path_version(request)
    table = await request.app[SERVICES_KEY].tables.get(version)
    if table is None:
        raise not_found(
            f"version {version} is not stored (never published, or trimmed)", "table_not_found"
        )
    return json_response(table)


async def get_classifier(request: web.Request) -> web.Response:
    table = await request.app[SERVICES_KEY].tables.current()
    if table is None:
        raise not_found("no table has been published yet", "table_not_found")
    return json_response(classifier_report(table))


async def get_history(request: web.Request) -> web.Response:
    current, versions = await request.app[SERVICES_KEY].tables.history()
    body = TableHistory(
        current=current,
        versions=[TableVersionSummary.model_validate(v, from_attributes=True) for v in versions],
    )
    return json_response(body)


async def post_rollback(request: web.Request) -> web.Response:
    wanted = await read_model(request, RollbackRequest)
    result = await request.app[SERVICES_KEY].publisher.rollback(wanted.version)
    request.app[METRICS_KEY].published_version.set(result.version)
    body = RollbackResponse(
        version=result.version,
        previous_version=result.previous_version,
        content_sha256=result.content_sha256,
    )
    return json_response(body)


_TABLE = ResponseDoc("the table", "RoutingTable")
_NO_TABLE = ResponseDoc("no such table", "ErrorEnvelope")
_INVALID = ResponseDoc("the stored table does not validate", "ErrorEnvelope")

ROUTES: tuple[ApiRoute, ...] = (
    ApiRoute(
        "POST",
        "/v1/tables",
        "post_tables",
        post_tables,
        "Rebuild the table from the stored profiles and policy, and publish it",
        {
            200: ResponseDoc(
                "same content as the current table: nothing published", "PublishResponse"
            ),
            201: ResponseDoc("published a new version", "PublishResponse"),
            409: ResponseDoc(
                "the stored profiles or policy cannot make a table (table_rejected), stored "
                "data is invalid, or another publish is in progress",
                "ErrorEnvelope",
            ),
        },
        write=True,
    ),
    ApiRoute(
        "GET",
        "/v1/tables",
        "get_history",
        get_history,
        "Kept table versions, newest first",
        {200: ResponseDoc("the history", "TableHistory")},
    ),
    ApiRoute(
        "GET",
        "/v1/tables/current",
        "get_current",
        get_current,
        "The table data planes serve",
        {200: _TABLE, 404: _NO_TABLE, 409: _INVALID},
    ),
    ApiRoute(
        "POST",
        "/v1/tables/rollback",
        "post_rollback",
        post_rollback,
        "Point the current table back at a kept version",
        {
            200: ResponseDoc("the pointer moved", "RollbackResponse"),
            404: ResponseDoc("the version is not kept", "ErrorEnvelope"),
            409: ResponseDoc("stored table invalid, or a publish in progress", "ErrorEnvelope"),
        },
        write=True,
        body="RollbackRequest",
    ),
    ApiRoute(
        "GET",
        r"/v1/tables/{version:\d+}",  # digits only: "rollback" and "current" are not versions
        "get_version",
        get_version,
        "One kept table version",
        {200: _TABLE, 404: _NO_TABLE, 409: _INVALID},
        path_params={"version": VERSION_PARAM},
    ),
    ApiRoute(
        "GET",
        "/v1/classifier",
        "get_classifier",
        get_classifier,
        "The current table's category classifier: training sources, cross-validated accuracy "
        "and confusion matrix",
        {
            200: ResponseDoc("the classifier report", "ClassifierReport"),
            404: _NO_TABLE,
            409: _INVALID,
        },
    ),
)
