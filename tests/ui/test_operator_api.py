"""The operator page's routes over HTTP on a real stack: the HTML and its assets, the table
view, the merged live state, and the explainer proxy (including every way it can fail)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aiohttp import web

from contracts.redis_keys import RedisKeys
from contracts.routing_table import RoutingTable
from control_plane.app import AppDeps, create_app
from control_plane.build.scoring import category_workload
from control_plane.ui.view import pareto_front
from tests.support.redis_server import RedisProcess, free_port, running_redis
from tests.support.waiting import eventually
from tests.ui.stack import (
    ADMIN,
    ServerFactory,
    Stack,
    base_url,
    client,
    cp_settings,
    write_state,
)

pytestmark = pytest.mark.integration
PRUNED = "llama-3.1-8b-instruct@int8-w8a8"


async def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, Any, str]:
    """(status, headers, text)."""
    async with client() as session, session.get(url, headers=headers) as resp:
        return resp.status, resp.headers, await resp.text()


async def _post(
    url: str, body: bytes, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, Any]]:
    async with (
        client() as session,
        session.post(url, data=body, headers=headers) as resp,
    ):
        return resp.status, await resp.json()


async def _control_plane(
    aiohttp_server: ServerFactory, url: str, keys: RedisKeys, **kw: Any
) -> str:
    server = await aiohttp_server(create_app(cp_settings(url, keys, **kw), AppDeps()))
    return base_url(server)


@pytest.mark.parametrize("path", ["/", "/ui"])
async def test_the_page_is_plain_html_with_a_strict_policy(stack: Stack, path: str) -> None:
    status, headers, text = await _get(f"{stack.cp_url}{path}")
    assert status == 200
    assert headers["Content-Type"].startswith("text/html")
    policy = headers["Content-Security-Policy"]
    assert "default-src 'none'" in policy
    assert "script-src 'self'" in policy
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert "<title>Gearbox operator</title>" in text
    assert "http://" not in text
    assert "https://" not in text


@pytest.mark.parametrize(
    ("name", "kind"), [("app.js", "text/javascript"), ("chart.js", "text/javascript"),
                       ("style.css", "text/css")]
)  # fmt: skip
async def test_assets_are_served_with_their_types(stack: Stack, name: str, kind: str) -> None:
    status, headers, text = await _get(f"{stack.cp_url}/ui/static/{name}")
    assert status == 200
    assert headers["Content-Type"].startswith(kind)
    assert "http://" not in text.replace("http://www.w3.org/2000/svg", "")


@pytest.mark.parametrize("name", ["index.html", "nope.js", "..%2Foperator_page.py", "%2e%2e"])
async def test_only_listed_assets_are_served(stack: Stack, name: str) -> None:
    status, _, text = await _get(f"{stack.cp_url}/ui/static/{name}")
    assert status == 404
    assert json.loads(text)["error"]["code"] in {"asset_not_found", "route_not_found"}


async def test_table_view_has_every_pair_scores_and_frontier(stack: Stack) -> None:
    status, _, text = await _get(f"{stack.cp_url}/ui/api/table")
    assert status == 200
    assert "svc.cluster.local" not in text  # ids only, never endpoint URLs
    body = json.loads(text)
    assert body["current_version"] == stack.version
    assert [v["version"] for v in body["history"]] == [stack.version]
    assert body["explainer"] is True
    view = body["table"]
    raw = await stack.redis.get(stack.keys.table_version(stack.version))
    assert raw is not None
    table = RoutingTable.model_validate_json(raw)
    served = [p for p in view["pairs"] if p["status"] == "served"]
    assert [p["pair"] for p in served] == [e.pair for e in table.entries]
    pruned = [p for p in view["pairs"] if p["status"] == "pruned"]
    assert [p["pair"] for p in pruned] == [PRUNED]
    assert pruned[0]["dominated_by"] == "llama-3.1-8b-instruct@fp8"
    assert set(pruned[0]["categories"]) == set(table.categories)  # figures from its profile
    for entry, shown in zip(table.entries, served, strict=True):
        assert shown["endpoints"] == [e.id for e in entry.endpoints]
        for category in table.categories:
            point = shown["categories"][category]
            assert point["utility"] == entry.utility[category]
            assert point["accuracy"] == entry.accuracy.get(category, 0.0)
            n_in, n_out = category_workload(table.policy, category)
            assert point["cost_usd"] == pytest.approx(entry.cost_usd(n_in, n_out))
    for category in table.categories:
        coords = {
            p["pair"]: (
                p["categories"][category]["cost_usd"],
                p["categories"][category]["latency_s"],
                p["categories"][category]["accuracy"],
            )
            for p in served
        }
        marked = {p["pair"] for p in served if p["categories"][category]["frontier"]}
        assert marked == pareto_front(coords)


async def test_table_view_of_a_kept_version_and_bad_versions(stack: Stack) -> None:
    status, _, text = await _get(f"{stack.cp_url}/ui/api/table?version={stack.version}")
    assert status == 200
    assert json.loads(text)["table"]["version"] == stack.version
    status, _, text = await _get(f"{stack.cp_url}/ui/api/table?version=999")
    assert status == 404
    assert json.loads(text)["error"]["code"] == "table_not_found"
    for bad in ("abc", "0", "-1", "1e3"):
        status, _, text = await _get(f"{stack.cp_url}/ui/api/table?version={bad}")
        assert status == 400, bad
        assert json.loads(text)["error"]["param"] == "version"


async def test_table_view_before_any_publish(
    aiohttp_server: ServerFactory, redis_server: RedisProcess, redis_keys: RedisKeys
) -> None:
    cp = await _control_plane(aiohttp_server, redis_server.url, redis_keys)
    status, _, text = await _get(f"{cp}/ui/api/table")
    assert status == 200
    body = json.loads(text)
    assert body["table"] is None
    assert body["history"] == []
    assert body["current_version"] is None
    assert body["explainer"] is False


async def test_a_pruned_pair_whose_profile_changed_has_no_figures(stack: Stack) -> None:
    async with client(ADMIN) as session:
        async with session.delete(f"{stack.cp_url}/v1/profiles/{PRUNED}") as resp:
            assert resp.status in (200, 204), await resp.text()
        async with session.get(f"{stack.cp_url}/ui/api/table") as resp:
            view = (await resp.json())["table"]
    pruned = next(p for p in view["pairs"] if p["pair"] == PRUNED)
    assert pruned["categories"] == {}
    assert pruned["reference_cost_usd"] is None
    assert any(PRUNED in note for note in view["notes"])


async def test_live_view_merges_instances(stack: Stack) -> None:
    fp8 = "llama-3.1-8b-instruct@fp8"
    await write_state(
        stack.redis,
        stack.keys,
        "ui-dp-b",
        {f"{fp8}#0": (fp8, "half_open", 3), f"{fp8}#1": (fp8, "open", 1)},
        {fp8: 7},
        stack.version - 1 if stack.version > 1 else None,
        fallbacks=2,
    )
    await stack.redis.set(stack.keys.data_plane_state("garbage"), b"{not json", ex=60)

    async def merged() -> dict[str, Any]:
        status, _, text = await _get(f"{stack.cp_url}/ui/api/live")
        assert status == 200
        assert "svc.cluster.local" not in text
        doc: dict[str, Any] = json.loads(text)
        return doc

    async def both() -> bool:
        versions = {i["instance"]: i["table_version"] for i in (await merged())["instances"]}
        return len(versions) == 2 and versions.get("ui-dp") == stack.version

    await eventually(both, timeout_s=20, what="the data plane shares the version it serves")
    live = await merged()
    assert live["current_table_version"] == stack.version
    assert live["unreadable_states"] == 1
    instances = {i["instance"]: i for i in live["instances"]}
    assert set(instances) == {"ui-dp", "ui-dp-b"}
    assert instances["ui-dp-b"]["stale"] is True
    assert instances["ui-dp"]["stale"] is False
    assert instances["ui-dp-b"]["open_breakers"] == 1
    endpoints = {e["endpoint_id"]: e for e in live["endpoints"]}
    assert endpoints[f"{fp8}#1"]["breaker"] == "open"
    assert endpoints[f"{fp8}#1"]["breakers"] == {"ui-dp": "closed", "ui-dp-b": "open"}
    assert endpoints[f"{fp8}#0"]["breaker"] == "half_open"
    assert endpoints[f"{fp8}#0"]["in_flight"] == 3
    assert live["requests_by_pair"][fp8] >= 7
    assert live["fallbacks_total"] >= 2


async def test_reads_need_the_token_when_reads_are_protected(
    aiohttp_server: ServerFactory, redis_server: RedisProcess, redis_keys: RedisKeys
) -> None:
    cp = await _control_plane(aiohttp_server, redis_server.url, redis_keys, protect_reads=True)
    assert (await _get(f"{cp}/ui"))[0] == 200  # the page itself carries no data
    assert (await _get(f"{cp}/ui/static/app.js"))[0] == 200
    for path in ("/ui/api/table", "/ui/api/live"):
        assert (await _get(f"{cp}{path}"))[0] == 401
        assert (await _get(f"{cp}{path}", ADMIN))[0] == 200
    status, body = await _post(f"{cp}/ui/api/route", b"{}")
    assert status == 401
    assert body["error"]["code"] == "invalid_token"


async def test_redis_down_is_a_503_not_a_500(
    aiohttp_server: ServerFactory, redis_keys: RedisKeys
) -> None:
    with running_redis() as private:
        cp = await _control_plane(aiohttp_server, private.url, redis_keys, redis_retries=0)
        assert (await _get(f"{cp}/ui/api/live"))[0] == 200
        private.stop()
        for path in ("/ui/api/live", "/ui/api/table"):
            status, headers, text = await _get(f"{cp}{path}")
            assert status == 503, text
            assert json.loads(text)["error"]["code"] == "redis_unavailable"
            assert headers["Retry-After"]


# --- the explainer proxy ---------------------------------------------------------------------

CHAT = json.dumps({"model": "auto", "messages": [{"role": "user", "content": "Say hi."}]})


def _endpoints_sorted(explained: dict[str, Any]) -> dict[str, Any]:
    candidates = [
        {**c, "endpoints": sorted(c["endpoints"])} for c in explained.get("candidates", [])
    ]
    return {**explained, "candidates": candidates}


async def test_explainer_forwards_body_and_budget_headers(stack: Stack) -> None:
    headers = {"X-Latency-Budget-Ms": "9000", "X-Min-Accuracy": "0.9", "X-Task-Category": "math"}
    via = {**headers, **ADMIN}
    status, via_cp = await _post(f"{stack.cp_url}/ui/api/route", CHAT.encode(), via)
    assert status == 200
    _, direct = await _post(f"{stack.dp_url}/v1/route", CHAT.encode(), headers)
    # Within a pair the endpoints come in power-of-two-choices order, drawn per call.
    assert _endpoints_sorted(via_cp) == _endpoints_sorted(direct)
    assert via_cp["category"] == "math"
    assert via_cp["budget"]["min_accuracy"] == 0.9


async def test_explainer_passes_data_plane_errors_through(stack: Stack) -> None:
    status, body = await _post(
        f"{stack.cp_url}/ui/api/route", CHAT.encode(), {"X-Min-Accuracy": "1.5", **ADMIN}
    )
    assert status == 400
    assert body["error"]["code"] == "invalid_budget"
    assert body["error"]["param"] == "X-Min-Accuracy"
    status, body = await _post(f"{stack.cp_url}/ui/api/route", b"{not json", ADMIN)
    assert status == 400
    assert body["error"]["code"] == "invalid_json"


async def test_explainer_needs_the_token_even_when_reads_are_open(stack: Stack) -> None:
    """It makes the control plane call another service: never for an anonymous caller."""
    for headers in ({}, {"Authorization": "Bearer not-the-token"}):
        status, body = await _post(f"{stack.cp_url}/ui/api/route", CHAT.encode(), headers)
        assert status == 401
        assert body["error"]["code"] == "invalid_token"
    assert (await _get(f"{stack.cp_url}/ui/api/table"))[0] == 200  # reads stay open here


async def test_explainer_calls_share_one_kept_alive_connection(
    aiohttp_server: ServerFactory, redis_server: RedisProcess, redis_keys: RedisKeys
) -> None:
    """One client session for the app's lifetime: consecutive clicks reuse its connection
    (a session per call opened, and closed, one connection each)."""
    peers: list[object] = []

    async def route(request: web.Request) -> web.Response:
        assert request.transport is not None
        peers.append(request.transport.get_extra_info("peername"))
        return web.json_response({"routed": False})

    upstream_app = web.Application()
    upstream_app.router.add_post("/v1/route", route)
    upstream = await aiohttp_server(upstream_app)
    cp = await _control_plane(
        aiohttp_server, redis_server.url, redis_keys, data_plane_url=base_url(upstream)
    )
    for _ in range(3):
        assert (await _post(f"{cp}/ui/api/route", CHAT.encode(), ADMIN))[0] == 200
    assert len(peers) == 3
    assert len(set(peers)) == 1


async def test_explainer_without_a_data_plane(
    aiohttp_server: ServerFactory, redis_server: RedisProcess, redis_keys: RedisKeys
) -> None:
    cp = await _control_plane(aiohttp_server, redis_server.url, redis_keys)
    status, body = await _post(f"{cp}/ui/api/route", CHAT.encode(), ADMIN)
    assert status == 503
    assert body["error"]["code"] == "data_plane_not_configured"
    assert "GEARBOX_CP_DATA_PLANE_URL" in body["error"]["message"]


async def test_explainer_with_an_unreachable_data_plane(
    aiohttp_server: ServerFactory, redis_server: RedisProcess, redis_keys: RedisKeys
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    cp = await _control_plane(aiohttp_server, redis_server.url, redis_keys, data_plane_url=dead)
    status, body = await _post(f"{cp}/ui/api/route", CHAT.encode(), ADMIN)
    assert status == 502
    assert body["error"]["code"] == "data_plane_unreachable"
    assert dead not in body["error"]["message"]  # the URL stays on the server


async def test_explainer_refuses_a_non_json_answer(
    aiohttp_server: ServerFactory, redis_server: RedisProcess, redis_keys: RedisKeys
) -> None:
    async def html(request: web.Request) -> web.Response:
        return web.Response(text="<html>proxy error</html>", content_type="text/html")

    odd = web.Application()
    odd.router.add_post("/v1/route", html)
    upstream = await aiohttp_server(odd)
    cp = await _control_plane(
        aiohttp_server, redis_server.url, redis_keys, data_plane_url=base_url(upstream)
    )
    status, body = await _post(f"{cp}/ui/api/route", CHAT.encode(), ADMIN)
    assert status == 502
    assert body["error"]["code"] == "data_plane_bad_answer"


@pytest.mark.parametrize("url", ["ftp://x", "http://", "http://a b", "http://h/?q=1", "http://u@h"])
def test_data_plane_url_setting_is_checked(url: str, redis_keys: RedisKeys) -> None:
    with pytest.raises(ValueError, match="data_plane_url"):
        cp_settings("redis://127.0.0.1:1/0", redis_keys, data_plane_url=url)


async def test_operator_routes_are_counted_and_documented(stack: Stack) -> None:
    await _get(f"{stack.cp_url}/ui/api/table")
    _, _, metrics = await _get(f"{stack.cp_url}/metrics")
    assert 'gearbox_cp_admin_requests_total{route="ui_table",status="200"}' in metrics
    _, _, text = await _get(f"{stack.cp_url}/openapi.json")
    paths = json.loads(text)["paths"]
    assert {
        "/",
        "/ui",
        "/ui/static/{name}",
        "/ui/api/table",
        "/ui/api/live",
        "/ui/api/route",
    } <= set(paths)
    assert "security" in json.loads(text)["paths"]["/v1/tables/rollback"]["post"]
    assert "security" in json.loads(text)["paths"]["/ui/api/route"]["post"]
