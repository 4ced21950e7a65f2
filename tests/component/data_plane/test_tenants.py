"""Tenants and priorities through the HTTP front door (docs/data_plane.md, "Tenants,
priorities and admission"): per-tenant counters, bounded labels, precise 400s."""

from __future__ import annotations

import json

from data_plane.request.tenant import key_tenant
from tests.component.data_plane.conftest import CHAT_BODY, MakeHarness
from tests.component.data_plane.fakes import ok_json, two_pair_table

FP16, INT4 = "http://fp16-a", "http://int4-a"
ROUTES = {FP16: ok_json(), INT4: ok_json()}
BODY = json.dumps(CHAT_BODY).encode()


async def test_a_tenants_requests_budgets_and_cost_are_counted(make_harness: MakeHarness) -> None:
    h = await make_harness(two_pair_table([FP16], [INT4]), routes=ROUTES)
    headers = {"x-gearbox-tenant": "team-a", "X-Latency-Budget-Ms": "5000"}
    for _ in range(2):
        resp = await h.client.post("/v1/chat/completions", data=BODY, headers=headers)
        assert resp.status == 200
    who = {"tenant": "team-a", "priority": "standard"}
    assert h.metric("gearbox_tenant_requests_total", **who) == 2
    assert h.metric("gearbox_tenant_budget_outcomes_total", **who, outcome="met") == 2
    assert h.metric("gearbox_tenant_cost_usd_total", **who) > 0


async def test_an_api_key_is_its_own_tenant_by_hash_and_the_key_is_not_exported(
    make_harness: MakeHarness,
) -> None:
    key = "client-key-0123456789"
    h = await make_harness(two_pair_table([FP16], [INT4]), routes=ROUTES, api_keys=key)
    auth = {"Authorization": f"Bearer {key}", "X-Priority": "critical"}
    resp = await h.client.post("/v1/chat/completions", data=BODY, headers=auth)
    assert resp.status == 200
    who = {"tenant": key_tenant(key, None), "priority": "critical"}
    assert h.metric("gearbox_tenant_requests_total", **who) == 1
    scrape = await (await h.client.get("/metrics")).text()
    assert key not in scrape


async def test_tenant_labels_stay_bounded(make_harness: MakeHarness) -> None:
    h = await make_harness(two_pair_table([FP16], [INT4]), routes=ROUTES, tenant_top_n=2)
    for i in range(12):
        tenant = {"x-gearbox-tenant": f"t{i}"}
        resp = await h.client.post("/v1/chat/completions", data=BODY, headers=tenant)
        assert resp.status == 200
    scrape = await (await h.client.get("/metrics")).text()
    lines = [x for x in scrape.splitlines() if x.startswith("gearbox_tenant_requests_total{")]
    labels = {x.split('tenant="')[1].split('"')[0] for x in lines}
    assert "other" in labels
    assert len(labels - {"other"}) <= 4  # at most 2 x top_n tenants ever labelled


async def test_an_unknown_priority_or_a_bad_tenant_is_a_400_naming_the_header(
    make_harness: MakeHarness,
) -> None:
    h = await make_harness(two_pair_table([FP16], [INT4]), routes=ROUTES)
    for headers, param in (
        ({"X-Priority": "urgent"}, "X-Priority"),
        ({"x-gearbox-tenant": "has space"}, "x-gearbox-tenant"),
    ):
        resp = await h.client.post("/v1/chat/completions", data=BODY, headers=headers)
        assert resp.status == 400
        assert (await resp.json())["error"]["param"] == param
    assert h.upstream.requests == []
