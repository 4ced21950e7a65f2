"""Tenants and priorities through the HTTP front door (docs/data_plane.md, "Tenants,
priorities and admission"): per-tenant counters, bounded labels, precise 400s."""

from __future__ import annotations

import asyncio
import json

from contracts.routing_table import RoutingTable
from data_plane.app import OVERSHOOT
from data_plane.request.tenant import key_tenant
from data_plane.resilience.output_length import MIN_SAMPLES as OUTPUT_SAMPLES
from data_plane.resilience.overshoot import MIN_SAMPLES
from tests.component.data_plane.conftest import CHAT_BODY, MakeHarness
from tests.component.data_plane.fakes import (
    FakeResponse,
    chat_json,
    make_table,
    ok_json,
    pair_entry,
    two_pair_table,
)
from tests.support.waiting import eventually

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
    auth = {"Authorization": f"Bearer {key}", "X-Priority": "batch"}
    resp = await h.client.post("/v1/chat/completions", data=BODY, headers=auth)
    assert resp.status == 200
    who = {"tenant": key_tenant(key, None), "priority": "batch"}
    assert h.metric("gearbox_tenant_requests_total", **who) == 1
    scrape = await (await h.client.get("/metrics")).text()
    assert key not in scrape


async def test_llm_ds_objective_header_gives_the_class_the_policy_maps_it_to(
    make_harness: MakeHarness,
) -> None:
    """In the HTTP data plane the objective header is a client's claim: a class above the
    default needs the right (here: the gateway in front sets the priority headers)."""
    policy = {"objectives": {"premium-traffic": "critical"}}
    table = two_pair_table([FP16], [INT4], policy=policy)
    h = await make_harness(table, routes=ROUTES, priority_header_trusted=True)
    headers = {"x-gearbox-tenant": "team-a", "x-llm-d-inference-objective": "premium-traffic"}
    resp = await h.client.post("/v1/chat/completions", data=BODY, headers=headers)
    assert resp.status == 200
    critical = {"tenant": "team-a", "priority": "critical"}
    assert h.metric("gearbox_tenant_requests_total", **critical) == 1


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
        ({"x-gearbox-tenant": "x" * 257}, "x-gearbox-tenant"),
    ):
        resp = await h.client.post("/v1/chat/completions", data=BODY, headers=headers)
        assert resp.status == 400
        assert (await resp.json())["error"]["param"] == param
    assert h.upstream.requests == []


# Every class may fill the whole sustainable concurrency: only the fair share tells the
# tenants apart here (the critical headroom is decision/admission.py's, tested there).
FLAT_SHARES = {
    "priorities": {"critical": {"sheddable": False}, "standard": {"share": 1.0}},
}


def one_pair_of_capacity(capacity: int) -> RoutingTable:
    """One pair whose engine was profiled up to `capacity` requests at once, predicted to take
    about a second: it sustains `capacity` requests in flight."""
    entry = pair_entry("fam", "fp16", urls=[FP16], ttft_base_s=1.0)
    entry["latency"]["max_profiled_load"] = capacity
    return make_table([entry], policy=FLAT_SHARES)


async def test_a_bursting_tenant_gets_its_fair_share_of_an_overloaded_pair_and_no_more(
    make_harness: MakeHarness,
) -> None:
    """Two requests of one tenant go in alone (no other tenant to protect), then a steady
    tenant's: two tenants active at a pair that sustains 4. The bursting tenant's third is
    shed (it holds 2, its fair share of the 4) though the pair has room, the steady tenant's
    second goes in. Both sheddable (the default class): only the fair share tells them
    apart. The queue is off here, to see the refusal itself; with it the third waits
    (tests/component/data_plane/test_flow.py)."""
    hold = {FP16: lambda r: FakeResponse(body=chat_json(), delays_s={0: 1.0})}
    h = await make_harness(
        one_pair_of_capacity(4), routes=hold, engine_deadline_factor=0, flow_queue=False
    )
    bursty, steady = {"x-gearbox-tenant": "bursty"}, {"x-gearbox-tenant": "steady"}

    async def ask(headers: dict[str, str]) -> tuple[int, dict[str, str]]:
        resp = await h.client.post("/v1/chat/completions", data=BODY, headers=headers)
        await resp.read()
        return resp.status, dict(resp.headers)

    burst = [asyncio.create_task(ask(bursty)) for _ in range(2)]
    await eventually(lambda: len(h.upstream.requests) == 2, what="the burst holds the engine")
    steady_task = asyncio.create_task(ask(steady))
    await eventually(lambda: len(h.upstream.requests) == 3, what="the steady request goes in")
    status, headers = await ask(bursty)
    assert status == 429
    assert int(headers["Retry-After"]) >= 1
    assert headers["x-should-retry"] == "true"
    second = asyncio.create_task(ask(steady))
    await eventually(lambda: len(h.upstream.requests) == 4, what="the steady tenant's second")
    assert [s for s, _ in await asyncio.gather(steady_task, second, *burst)] == [200] * 4
    assert h.metric("gearbox_tenant_shed_total", tenant="bursty", priority="standard") == 1
    assert h.metric("gearbox_tenant_shed_total", tenant="steady", priority="standard") == 0
    # Work-conserving: once the others left, a lone tenant may fill the pair again.
    again = await asyncio.gather(*(ask(bursty) for _ in range(4)))
    assert [s for s, _ in again] == [200] * 4


async def test_the_fair_share_is_judged_on_the_pair_that_serves(make_harness: MakeHarness) -> None:
    """Outside the canary fraction (0 here) the family baseline, fam@fp16, serves: its
    capacity (4) is what the tenants share, not the fleet of the cheap pair the router would
    have chosen (64 more, never full here)."""
    fp16 = pair_entry("fam", "fp16", urls=[FP16], accuracy=0.9, usd_per_mtok=4.0, ttft_base_s=1.0)
    fp16["latency"]["max_profiled_load"] = 4
    int4 = pair_entry("fam", "int4", urls=[INT4], accuracy=0.6, precision_rank=1)
    routes = {
        url: lambda r: FakeResponse(body=chat_json(), delays_s={0: 1.0}) for url in (FP16, INT4)
    }
    table = make_table([fp16, int4], policy={"canary_fraction": 0.0, **FLAT_SHARES})
    h = await make_harness(table, routes=routes, engine_deadline_factor=0, flow_queue=False)

    async def ask(tenant: str) -> int:
        headers = {"x-gearbox-tenant": tenant}
        resp = await h.client.post("/v1/chat/completions", data=BODY, headers=headers)
        await resp.read()
        assert resp.status != 200 or resp.headers["X-Route-Pair"] == "fam@fp16"
        return resp.status

    burst = [asyncio.create_task(ask("bursty")) for _ in range(2)]
    await eventually(lambda: len(h.upstream.requests) == 2, what="the burst holds fp16")
    steady = asyncio.create_task(ask("steady"))
    await eventually(lambda: len(h.upstream.requests) == 3, what="the steady request goes in")
    assert await ask("bursty") == 429
    assert await steady == 200
    assert await asyncio.gather(*burst) == [200] * 2


async def test_each_answer_counts_toward_its_pairs_margin(make_harness: MakeHarness) -> None:
    """The margin admission takes off a budget (docs/data_plane.md, "Tenants, priorities and
    admission") is fed by the answers served: none before 8 samples, then the pair has one."""
    h = await make_harness(two_pair_table([FP16], [INT4]), routes=ROUTES)
    headers = {"x-gearbox-tenant": "team-a"}
    for i in range(MIN_SAMPLES):
        assert "fam@int4" not in h.app[OVERSHOOT].raw()
        resp = await h.client.post("/v1/chat/completions", data=BODY, headers=headers)
        assert resp.status == 200, i
    margin_s, _ = h.app[OVERSHOOT].raw()["fam@int4"]
    assert margin_s >= 0.0


async def test_the_output_lengths_learned_are_on_the_metrics_page_under_bounded_labels(
    make_harness: MakeHarness,
) -> None:
    """Issue 32: flow control predicts a tenant's requests at the p90 of its answers'
    `usage.completion_tokens` (`resilience.output_length`); the gauge shows each figure per
    family and category under the tenant's bounded label, the largest where tenants share
    `other`."""
    tokens = [3]
    answers = {FP16: lambda r: FakeResponse(body=chat_json(completion_tokens=tokens[0]))}
    table = make_table([pair_entry("fam", "fp16", urls=[FP16])])
    h = await make_harness(table, routes=answers, tenant_top_n=1)  # team-a's, then other
    for tenant, length in (("team-a", 3), ("team-b", 5), ("team-c", 6)):
        tokens[0] = length
        headers = {"x-gearbox-tenant": tenant, "X-Task-Category": "chat"}
        for _ in range(OUTPUT_SAMPLES):
            resp = await h.client.post("/v1/chat/completions", data=BODY, headers=headers)
            assert resp.status == 200
    learned = {"family": "fam", "category": "chat"}
    assert h.metric("gearbox_flow_output_tokens", tenant="team-a", **learned) == 3
    assert h.metric("gearbox_flow_output_tokens", tenant="other", **learned) == 6
    assert h.metric("gearbox_flow_output_tokens", tenant="team-b", **learned) == 0  # no label
