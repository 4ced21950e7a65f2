"""Priority and tenant by right through the HTTP front door (issue 32, finding 3;
docs/data_plane.md, "Tenants, priorities and admission"). Every test here failed on 95376ca:
`X-Priority` was taken as sent, the tenant header won over the API key's tenant, an id like
`auth0|...` was a 400, no response named its class or tenant, and `/metrics` was open."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from aiohttp import web
from aiohttp.pytest_plugin import AiohttpClient
from pydantic import SecretStr

from data_plane.request.identity import PRIORITY_APPLIED, TENANT_APPLIED
from data_plane.request.tenant import FAIRNESS_ID_HEADER, key_tenant
from data_plane.serving.probes import Probes
from data_plane.table_store import TableStore
from data_plane.telemetry.metrics import DataPlaneMetrics
from data_plane.telemetry.tenants import label_of
from tests.component.data_plane.conftest import CHAT_BODY, Harness, MakeHarness
from tests.component.data_plane.fakes import (
    FakeResponse,
    chat_json,
    ok_json,
    sse_chunks,
    two_pair_table,
)
from tests.component.data_plane.test_tenants import FP16, INT4, one_pair_of_capacity
from tests.support.waiting import eventually

BODY = json.dumps(CHAT_BODY).encode()
ROUTES = {FP16: ok_json(), INT4: ok_json()}
PLAIN_KEY = "plain-client-key-01"
ACME_KEY = "acme-client-key-001"
EDGE_KEY = "edge-gateway-key-01"
PRINCIPAL = "auth0|5f3c2a1b9e8d7c6b5a4f3e2d"


async def ask(h: Harness, headers: dict[str, str]) -> tuple[int, dict[str, str]]:
    resp = await h.client.post("/v1/chat/completions", data=BODY, headers=headers)
    await resp.read()
    return resp.status, dict(resp.headers)


async def test_a_bulk_client_claiming_critical_does_not_starve_a_standard_client(
    make_harness: MakeHarness,
) -> None:
    """No keys, no trusted gateway: the bulk tenant's `X-Priority: critical` is served as the
    default class (sheddable), so past its fair share it is shed like any standard request
    and the steady tenant beside it is served. On 95376ca the claimed critical class was
    never shed: all 6 bulk requests went in and filled the pair. The flow queue is off, so
    the bulk requests past their share are refused at once rather than held until the pair
    drains (with the queue they wait: tests/component/data_plane/test_tenant_fairness.py)."""
    hold = {FP16: lambda r: FakeResponse(body=chat_json(), delays_s={0: 1.0})}
    h = await make_harness(
        one_pair_of_capacity(4), routes=hold, engine_deadline_factor=0, flow_queue=False
    )
    bulk = {"x-gearbox-tenant": "bulk", "X-Priority": "critical"}
    steady = {"x-gearbox-tenant": "steady"}
    burst = [asyncio.create_task(ask(h, bulk)) for _ in range(2)]
    await eventually(lambda: len(h.upstream.requests) == 2, what="the bulk tenant holds 2")
    first = asyncio.create_task(ask(h, steady))
    await eventually(lambda: len(h.upstream.requests) == 3, what="the steady request goes in")
    more = await asyncio.gather(*(ask(h, bulk) for _ in range(4)))
    assert [s for s, _ in more] == [429] * 4
    assert {(r[PRIORITY_APPLIED], r[TENANT_APPLIED]) for _, r in more} == {("standard", "bulk")}
    second = asyncio.create_task(ask(h, steady))
    await eventually(lambda: len(h.upstream.requests) == 4, what="the steady tenant's second")
    served = await asyncio.gather(first, second, *burst)
    assert [s for s, _ in served] == [200] * 4
    assert {r[PRIORITY_APPLIED] for _, r in served} == {"standard"}
    assert h.metric("gearbox_tenant_shed_total", tenant="bulk", priority="standard") == 4
    assert h.metric("gearbox_tenant_requests_total", tenant="bulk", priority="critical") == 0


async def test_a_plain_key_holder_cannot_pose_as_another_tenant(
    make_harness: MakeHarness,
) -> None:
    """`API_KEYS` alone (the format of 95376ca, where either header won over the key)."""
    h = await make_harness(two_pair_table([FP16], [INT4]), routes=ROUTES, api_keys=PLAIN_KEY)
    auth = {"Authorization": f"Bearer {PLAIN_KEY}"}
    for posing in ({"x-gearbox-tenant": "victim"}, {FAIRNESS_ID_HEADER: "victim"}):
        status, _ = await ask(h, {**auth, **posing, "X-Priority": "critical"})
        assert status == 200
    own = {"tenant": key_tenant(PLAIN_KEY, None), "priority": "standard"}
    assert h.metric("gearbox_tenant_requests_total", tenant="victim", priority="critical") == 0
    assert h.metric("gearbox_tenant_requests_total", **own) == 2


async def test_a_principal_shaped_tenant_id_is_accepted(make_harness: MakeHarness) -> None:
    """Without keys the tenant header is read as sent (the deployment's gateway sets it)."""
    h = await make_harness(two_pair_table([FP16], [INT4]), routes=ROUTES)
    for principal in (PRINCIPAL, "john+ci@example.com", "spiffe://cluster.local/ns/a/sa/b"):
        status, headers = await ask(h, {"x-gearbox-tenant": principal})
        assert status == 200
        assert headers[TENANT_APPLIED] == label_of(principal)
    long_id = "team-" + "x" * 200
    status, headers = await ask(h, {FAIRNESS_ID_HEADER: long_id})
    assert (status, headers[TENANT_APPLIED]) == (200, label_of(long_id))


async def test_a_stream_says_its_class_and_tenant_in_its_head(make_harness: MakeHarness) -> None:
    """A stream's head goes out from the handler, before the middleware: it carries both."""
    stream = FakeResponse(chunks=sse_chunks(["Hel", "lo"]), content_type="text/event-stream")
    h = await make_harness(two_pair_table([FP16], [INT4]), routes={INT4: lambda r: stream})
    body = json.dumps({**CHAT_BODY, "stream": True})
    headers = {"x-gearbox-tenant": "team-a", "X-Priority": "batch"}
    streamed = await h.client.post("/v1/chat/completions", data=body, headers=headers)
    assert streamed.headers["Content-Type"].startswith("text/event-stream")
    assert (streamed.headers[PRIORITY_APPLIED], streamed.headers[TENANT_APPLIED]) == (
        "batch",
        "team-a",
    )
    await streamed.read()


def keys_file(tmp_path: Path) -> Path:
    path = tmp_path / "client-keys.json"
    entries = [
        {"key": ACME_KEY, "tenant": "acme", "priorities": ["critical"]},
        {"key": EDGE_KEY, "tenant": "edge", "trusted_gateway": True},
    ]
    path.write_text(json.dumps(entries))
    return path


async def test_a_key_holder_cannot_become_another_tenant(
    make_harness: MakeHarness, tmp_path: Path
) -> None:
    h = await make_harness(
        two_pair_table([FP16], [INT4]),
        routes=ROUTES,
        api_keys=PLAIN_KEY,
        api_keys_file=keys_file(tmp_path),
    )
    for posing in ({"x-gearbox-tenant": "victim"}, {FAIRNESS_ID_HEADER: "victim"}):
        status, headers = await ask(h, {"Authorization": f"Bearer {ACME_KEY}", **posing})
        assert (status, headers[TENANT_APPLIED]) == (200, "acme")
        status, headers = await ask(h, {"Authorization": f"Bearer {PLAIN_KEY}", **posing})
        assert (status, headers[TENANT_APPLIED]) == (200, key_tenant(PLAIN_KEY, None))
    assert h.metric("gearbox_tenant_requests_total", tenant="acme", priority="standard") == 2
    assert h.metric("gearbox_tenant_requests_total", tenant="victim", priority="standard") == 0
    # Its grant lets acme's key ask for critical; the plain key may only lower its class.
    critical = {"X-Priority": "critical"}
    status, headers = await ask(h, {"Authorization": f"Bearer {ACME_KEY}", **critical})
    assert (status, headers[PRIORITY_APPLIED]) == (200, "critical")
    status, headers = await ask(h, {"Authorization": f"Bearer {PLAIN_KEY}", **critical})
    assert (status, headers[PRIORITY_APPLIED]) == (200, "standard")


async def test_a_trusted_gateways_key_names_the_principal_and_its_class(
    make_harness: MakeHarness, tmp_path: Path
) -> None:
    """The gateway derives the tenant from a real principal (`auth0|...`: a 400 on 95376ca);
    it is accepted, counted under a hashed label, and never exported raw."""
    h = await make_harness(
        two_pair_table([FP16], [INT4]), routes=ROUTES, api_keys_file=keys_file(tmp_path)
    )
    headers = {
        "Authorization": f"Bearer {EDGE_KEY}",
        "x-gearbox-tenant": PRINCIPAL,
        "X-Priority": "critical",
    }
    status, answer = await ask(h, headers)
    assert status == 200
    assert (answer[TENANT_APPLIED], answer[PRIORITY_APPLIED]) == (label_of(PRINCIPAL), "critical")
    assert answer[TENANT_APPLIED].startswith("t-")
    labels = {"tenant": label_of(PRINCIPAL), "priority": "critical"}
    assert h.metric("gearbox_tenant_requests_total", **labels) == 1
    scrape = await (await h.client.get("/metrics")).text()
    assert PRINCIPAL not in scrape
    # Without a header, the gateway's own tenant.
    status, answer = await ask(h, {"Authorization": f"Bearer {EDGE_KEY}"})
    assert (status, answer[TENANT_APPLIED]) == (200, "edge")


async def test_metrics_needs_its_token_when_one_is_set(make_harness: MakeHarness) -> None:
    token = "scrape-token-0123"
    h = await make_harness(two_pair_table([FP16], [INT4]), routes=ROUTES, metrics_token=token)
    for sent in ({}, {"Authorization": "Bearer wrong-token-0123"}, {"Authorization": token}):
        resp = await h.client.get("/metrics", headers=sent)
        assert resp.status == 401
        assert resp.headers["WWW-Authenticate"] == "Bearer"
        assert (await resp.json())["error"]["code"] == "invalid_metrics_token"
    resp = await h.client.get("/metrics", headers={"Authorization": f"Bearer {token}"})
    assert resp.status == 200
    assert "gearbox_build_info" in await resp.text()
    assert (await h.client.get("/healthz")).status == 200  # the probes stay open


async def test_gateway_modes_side_app_guards_metrics_the_same_way(
    aiohttp_client: AiohttpClient,
) -> None:
    """`gateway_app._side_app` serves these `Probes` with the same setting."""
    app = web.Application()
    metrics = DataPlaneMetrics("test", "test")
    app.add_routes(Probes(TableStore(), metrics, metrics_token=SecretStr("side-token-01")).routes())
    client = await aiohttp_client(app)
    assert (await client.get("/metrics")).status == 401
    ok = await client.get("/metrics", headers={"Authorization": "Bearer side-token-01"})
    assert ok.status == 200


async def test_metrics_stay_open_by_default(make_harness: MakeHarness) -> None:
    h = await make_harness(two_pair_table([FP16], [INT4]), routes=ROUTES)
    assert (await h.client.get("/metrics")).status == 200


async def test_undecodable_bearer_bytes_are_a_401_not_a_500(make_harness: MakeHarness) -> None:
    """aiohttp hands a header's non-UTF-8 bytes on as lone surrogates; comparing them with the
    keys (and the /metrics token) encoded them strictly: 500 on 95376ca for /v1/*."""
    h = await make_harness(
        two_pair_table([FP16], [INT4]),
        routes=ROUTES,
        api_keys=PLAIN_KEY,
        metrics_token="scrape-token-0123",
    )
    server = h.client.server
    for path in ("/v1/models", "/metrics"):
        reader, writer = await asyncio.open_connection(server.host, server.port)
        head = f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n".encode()
        writer.write(head + b"Authorization: Bearer \xff\xfe-key\r\n\r\n")
        await writer.drain()
        answer = await reader.read()
        writer.close()
        await writer.wait_closed()
        assert answer.split(b"\r\n")[0] == b"HTTP/1.1 401 Unauthorized", path
