"""GET /openapi.json: generated from the served routes and the models (issue 13 item 10)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest
import schemathesis
from aiohttp import web

from data_plane.serving.openapi import OPERATIONS, build_openapi
from data_plane.telemetry.metrics import Route
from data_plane.wiring import package_version
from tests.component.data_plane.conftest import CHAT_BODY, MakeHarness
from tests.component.data_plane.fakes import ok_json, two_pair_table

FP16, INT4 = "http://fp16-a", "http://int4-a"


def served_operations(app: web.Application) -> set[tuple[str, str]]:
    found = set()
    for route in app.router.routes():
        info = route.resource.get_info() if route.resource is not None else {}
        path = info.get("path") or info.get("formatter")
        if route.method != "HEAD" and path is not None:
            found.add((route.method.lower(), path.replace("{model:.+}", "{model}")))
    return found


async def test_the_served_document_covers_every_route(make_harness: MakeHarness) -> None:
    h = await make_harness(None, routes={})
    resp = await h.client.get("/openapi.json")
    assert resp.status == 200
    doc = await resp.json()
    assert doc["openapi"] == "3.1.0"
    documented = {(m, p) for p, ops in doc["paths"].items() for m in ops}
    assert documented == served_operations(h.app)
    schema = schemathesis.openapi.from_dict(doc)
    operations = [r.ok() for r in schema.get_all_operations()]  # type: ignore[union-attr]
    assert len(operations) == len(documented)
    for path, ops in doc["paths"].items():
        for operation in ops.values():
            assert ("security" in operation) == path.startswith("/v1/"), path
            # /metrics: 401 only when SERVER_METRICS_TOKEN is set, so no `security` requirement.
            guarded = path.startswith("/v1/") or path == "/metrics"
            assert ("401" in operation["responses"]) == guarded, path


async def test_the_document_and_the_build_info_report_one_version(
    make_harness: MakeHarness,
) -> None:
    h = await make_harness(None, routes={})
    doc = await (await h.client.get("/openapi.json")).json()
    metrics = await (await h.client.get("/metrics")).text()
    found = re.search(r'gearbox_build_info\{git_sha="[^"]*",version="([^"]+)"\}', metrics)
    assert found is not None
    assert doc["info"]["version"] == found.group(1) == package_version()


async def test_a_route_without_documentation_fails_the_build() -> None:
    async def nothing(request: web.Request) -> web.Response:
        return web.Response()

    with pytest.raises(KeyError, match="not documented"):
        build_openapi([web.get("/v1/new", nothing, name="new_route")], "0.1.0")
    assert "new_route" not in OPERATIONS


async def test_answers_match_the_served_schemas(make_harness: MakeHarness) -> None:
    h = await make_harness(two_pair_table([FP16], [INT4]), routes={INT4: ok_json()})
    doc = await (await h.client.get("/openapi.json")).json()
    # The loaded table's ids are the known values of `model`.
    model = doc["components"]["schemas"]["ChatRequest"]["properties"]["model"]
    assert sorted(model["anyOf"][0]["enum"]) == ["auto", "fam", "fam@fp16", "fam@int4"]

    def check(path: str, method: str, status: int, body: Any) -> None:
        reply = doc["paths"][path][method]["responses"][str(status)]
        schema = reply["content"]["application/json"]["schema"]
        resolver = {"components": doc["components"], **schema}
        jsonschema.validate(body, resolver)

    chat = "/v1/chat/completions"
    answers = [
        ("/v1/models", "get", await h.client.get("/v1/models")),
        ("/v1/models/{model}", "get", await h.client.get("/v1/models/fam")),
        ("/v1/models/{model}", "get", await h.client.get("/v1/models/nope")),
        ("/v1/route", "post", await h.client.post("/v1/route", json=CHAT_BODY)),
        (chat, "post", await h.client.post(chat, json=CHAT_BODY)),
        (chat, "post", await h.client.post(chat, json={})),
        ("/readyz", "get", await h.client.get("/readyz")),
        ("/healthz", "get", await h.client.get("/healthz")),
    ]  # fmt: skip
    for path, method, resp in answers:
        check(path, method, resp.status, await resp.json())


async def test_model_ids_are_not_in_the_document_when_the_api_needs_a_key(
    make_harness: MakeHarness,
) -> None:
    h = await make_harness(two_pair_table([FP16], [INT4]), routes={}, api_keys="client-key-1")
    resp = await h.client.get("/openapi.json")  # no key needed for the document itself
    assert resp.status == 200
    text = await resp.text()
    assert "fam@int4" not in text
    assert (await h.client.get("/v1/models")).status == 401


def test_metrics_doc_lists_every_route_label_value() -> None:
    text = (Path(__file__).parents[3] / "docs" / "METRICS.md").read_text()
    line = next(ln for ln in text.split("\n- ") if ln.startswith("`route`"))
    assert {v for v in re.findall(r"`([a-z_]+)`", line)} >= {r.value for r in Route}
