"""Both front doors share one decision step (`data_plane/decision_step.py`): the same request
through the HTTP data plane and through gateway mode's ext_proc gets the same pair, the same
reason and the same decision counters (docs/gateway.md, "What it does")."""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from types import FrameType
from typing import Any

import grpc
import pytest
from prometheus_client import CollectorRegistry

from contracts.routing_table import RoutingTable
from data_plane.app import HEALTH, METRICS
from data_plane.checks import accuracy_check
from data_plane.decision.compile import compile_table
from data_plane.gateway.router import gateway_router
from data_plane.gateway.service import ExternalProcessor, ServiceConfig, start_server
from data_plane.resilience.endpoint_load import LoadTracker
from data_plane.serving import lifecycle
from data_plane.serving.lifecycle import Request
from data_plane.table_store import TableStore
from data_plane.telemetry.metrics import DataPlaneMetrics, RequestOutcome
from tests.component.data_plane.conftest import MakeHarness
from tests.component.data_plane.fakes import make_table, ok_json, pair_entry, two_pair_table
from tests.component.data_plane.test_gateway_extproc import (
    BUFFERED,
    Gateway,
    body_message,
    error_of,
    exchange,
    headers_message,
    set_headers,
)
from tests.support.extproc_client import ExternalProcessorStub
from tests.support.waiting import eventually

FP16, INT4 = "http://fp16-a", "http://int4-a"
SHADOW = {"shadow": {"enabled": True, "default_pair": "fam@fp16"}}
# fam@int4 (accuracy 0.6) meets reasoning's floor, only fam@fp16 (0.9) meets chat's; the
# built-in classifier doubts between reasoning and chat on UNSURE (routed as chat).
FLOORS = {"categories": {"chat": {"min_accuracy": 0.8}, "reasoning": {"min_accuracy": 0.5},
                         "code": {}, "extraction": {}, "math": {}}}  # fmt: skip
UNSURE = "Compare these two options and tell me which is better."
STRICT_REFUSED = {"x-budget-mode": "strict", "x-min-accuracy": "0.99"}  # no pair reaches 0.99
BELOW_FLOOR = {"x-min-accuracy": "0.99"}  # best effort: the most accurate pair, with its chance
# What the decision step counts (durations by count only: their sums are times).
Answer = tuple[int, str, str | None]  # status, pair or error code, reason
DECISION_SERIES = (
    "gearbox_routing_decisions_total",
    "gearbox_shadow_decisions_total",
    "gearbox_no_route_total",
    "gearbox_category_abstentions_total",
    "gearbox_predicted_latency_seconds_count",
    "gearbox_predicted_latency_seconds_sum",
    "gearbox_complexity_score_count",
    "gearbox_complexity_score_sum",
    "gearbox_routing_decision_duration_seconds_count",
)


@dataclass(frozen=True)
class Case:
    policy: dict[str, Any]
    headers: Mapping[str, str]
    text: str = "Say hello."
    model: str = "auto"
    max_tokens: int = 8


CASES = {
    "cheapest": Case({}, {}),
    "strict-refused": Case({}, STRICT_REFUSED),
    "unknown-model": Case({}, {}, model="gpt-9"),
    "canary-baseline": Case({"canary_fraction": 0.0}, {}),
    "shadow": Case(SHADOW, {}),
    "shadow-serves-what-would-be-refused": Case(SHADOW, STRICT_REFUSED),
    "abstention": Case(FLOORS, {}, text=UNSURE),
    "abstention-refused": Case(FLOORS, STRICT_REFUSED, text=UNSURE),
    # X-Route-Reason: the pair's own best-effort reason and chance, then the doubt's suffix
    "best-effort": Case({}, BELOW_FLOOR),
    "best-effort-abstention": Case(FLOORS, BELOW_FLOOR, text=UNSURE),
}


def body(case: Case) -> bytes:
    messages = [{"role": "user", "content": case.text}]
    return json.dumps(
        {"model": case.model, "messages": messages, "max_tokens": case.max_tokens}
    ).encode()


def decision_counters(registry: CollectorRegistry) -> dict[tuple[str, tuple[Any, ...]], float]:
    """Every non-zero sample of the decision step's series."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): round(s.value, 9)
        for family in registry.collect()
        for s in family.samples
        if s.name in DECISION_SERIES and s.value != 0
    }


async def through_http(make_harness: MakeHarness, table: RoutingTable, case: Case) -> Any:
    h = await make_harness(table, routes={FP16: ok_json(), INT4: ok_json()})
    resp = await h.client.post("/v1/chat/completions", data=body(case), headers=case.headers)
    answer: Answer
    if resp.status == 200:
        answer = (200, resp.headers["X-Route-Pair"], resp.headers["X-Route-Reason"])
    else:
        answer = (resp.status, (await resp.json())["error"]["code"], None)
    return answer, decision_counters(h.app[METRICS].registry)


async def through_gateway(table: RoutingTable, case: Case) -> Any:
    store, metrics = TableStore(), DataPlaneMetrics("test", "test")
    store.swap(compile_table(table))
    router = gateway_router(store, metrics, random.Random(7), "x-gearbox-pair")
    processor = ExternalProcessor(router, metrics, ServiceConfig(BUFFERED, 64 * 1024))
    server, port = await start_server(processor, "127.0.0.1", 0)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            gw = Gateway(ExternalProcessorStub(channel), store, metrics)
            messages = [headers_message(dict(case.headers)), body_message(body(case), True)]
            responses = await exchange(gw, messages)
    finally:
        await server.stop(None)
    answer: Answer
    if responses[0].WhichOneof("response") == "immediate_response":
        status, error, _ = error_of(responses[0])
        answer = (status, error["error"]["code"], None)
    else:
        headers = set_headers(responses[0].request_headers.response)
        answer = (200, headers["x-gearbox-pair"], headers["x-gearbox-route-reason"])
    return answer, decision_counters(metrics.registry)


@pytest.mark.parametrize("name", sorted(CASES))
async def test_either_door_gives_the_same_decision_and_counters(
    make_harness: MakeHarness, name: str
) -> None:
    case = CASES[name]
    table = two_pair_table([FP16], [INT4], policy=case.policy)
    http_answer, http_counters = await through_http(make_harness, table, case)
    gateway_answer, gateway_counters = await through_gateway(table, case)
    assert gateway_answer == http_answer
    assert gateway_counters == http_counters
    assert http_counters  # every case counts something (a decision or a refusal)


async def test_shadow_mode_serves_the_default_pair_in_gateway_mode_too() -> None:
    """Shadow mode behaves as the deployment did without the router: even a request the
    router would refuse (strict, no pair meets the floor) goes to the default pair, and both
    the refusal and the adaptive choice are counted."""
    table = two_pair_table([FP16], [INT4], policy=SHADOW)
    refused, refused_counters = await through_gateway(table, CASES["strict-refused"])
    assert refused == (200, "fam@fp16", "shadow")
    assert refused_counters[("gearbox_no_route_total", (("reason", "budget_infeasible"),))] == 1
    served, served_counters = await through_gateway(table, CASES["cheapest"])
    assert served == (200, "fam@fp16", "shadow")
    assert served_counters[("gearbox_shadow_decisions_total", (("pair", "fam@int4"),))] == 1


ENDPOINTS = ("fam@fp16#0", "fam@int4#0")
BUDGET_1S = {"x-latency-budget-ms": "1000"}
# The request, the engines' queue depth, and the outcome both doors must count.
OUTCOME_CASES: dict[str, tuple[Case, float, str]] = {
    "served": (Case({}, BUDGET_1S), 0.0, "ok"),
    # 8 tokens at 0.02 s per token per request in flight: 3.4 s at 20 in flight, past 1 s.
    "shed": (Case({}, BUDGET_1S), 20.0, "shed"),
    "invalid": (Case({}, {}, max_tokens=-1), 0.0, "invalid_request"),
    "strict-refused": (Case({}, STRICT_REFUSED), 0.0, "budget_infeasible"),
    "unknown-model": (Case({}, {}, model="gpt-9"), 0.0, "no_route"),
    # A request that fails: no table is loaded yet (503 no_healthy_upstream in both doors).
    # An engine's failure is not one: gateway mode never sees the engine's answer.
    "no-table": (Case({}, BUDGET_1S), 0.0, "unavailable"),
}


def load_sensitive_table() -> RoutingTable:
    """`two_pair_table`'s pairs with a time per output token that grows 0.02 s per request
    in flight."""
    entries = [
        pair_entry("fam", "fp16", urls=[FP16], accuracy=0.9, usd_per_mtok=4.0),
        pair_entry("fam", "int4", urls=[INT4], accuracy=0.6, precision_rank=1),
    ]
    for e in entries:
        e["latency"]["tpot_per_load_s"] = 0.02
    return make_table(entries)


def request_outcomes(registry: CollectorRegistry) -> dict[str, float]:
    """`gearbox_requests_total` by outcome (docs/METRICS.md), non-zero samples only."""
    return {
        s.labels["outcome"]: s.value
        for family in registry.collect()
        for s in family.samples
        if s.name == "gearbox_requests_total" and s.value != 0
    }


def counted_since(before: dict[str, float], registry: CollectorRegistry) -> dict[str, float]:
    after = request_outcomes(registry)
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)}


async def second_outcome_http(
    make_harness: MakeHarness, table: RoutingTable | None, case: Case, load: float
) -> tuple[int, dict[str, float]]:
    """The status and the outcome counted for the second of two same requests."""
    h = await make_harness(table, routes={FP16: ok_json(), INT4: ok_json()})
    for endpoint in ENDPOINTS:
        h.app[HEALTH].tracker.set_queue_depth(endpoint, load, own=0)
    registry = h.app[METRICS].registry
    await (
        await h.client.post("/v1/chat/completions", data=body(case), headers=case.headers)
    ).read()
    before = request_outcomes(registry)
    resp = await h.client.post("/v1/chat/completions", data=body(case), headers=case.headers)
    await resp.read()
    return resp.status, counted_since(before, registry)


async def second_outcome_gateway(
    table: RoutingTable | None, case: Case, load: float
) -> tuple[int, dict[str, float]]:
    """As `second_outcome_http`, through gateway mode with `load` scraped."""
    store, metrics, tracker = TableStore(), DataPlaneMetrics("test", "test"), LoadTracker()
    if table is not None:
        store.swap(compile_table(table))
    for endpoint in ENDPOINTS:
        tracker.set_queue_depth(endpoint, load)
    router = gateway_router(store, metrics, random.Random(7), "x-gearbox-pair", tracker=tracker)
    processor = ExternalProcessor(router, metrics, ServiceConfig(BUFFERED, 64 * 1024))
    server, port = await start_server(processor, "127.0.0.1", 0)
    messages = [headers_message(dict(case.headers)), body_message(body(case), True)]
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            gw = Gateway(ExternalProcessorStub(channel), store, metrics)
            await exchange(gw, messages)
            before = request_outcomes(metrics.registry)
            responses = await exchange(gw, messages)
    finally:
        await server.stop(None)
    first = responses[0]
    status = error_of(first)[0] if first.WhichOneof("response") == "immediate_response" else 200
    return status, counted_since(before, metrics.registry)


@pytest.mark.parametrize("name", sorted(OUTCOME_CASES))
async def test_either_door_counts_the_same_request_outcome(
    make_harness: MakeHarness, name: str
) -> None:
    """`gearbox_requests_total{outcome}` names the same outcome through both doors
    (docs/METRICS.md): a request admission sheds is `shed` in gateway mode too. The second
    of two same requests is compared: the HTTP door's fleet is overloaded only once an
    arrival has counted there (`decision/capacity.py`), gateway mode's from the scrape."""
    case, load, outcome = OUTCOME_CASES[name]
    table = None if name == "no-table" else load_sensitive_table()
    http = await second_outcome_http(make_harness, table, case, load)
    gateway = await second_outcome_gateway(table, case, load)
    assert http[1] == {outcome: 1}
    assert gateway == http


class Created:
    """The `lifecycle.Request`s created while it is the profile hook (`sys.setprofile`), and
    the requests offered to the live checks (`AccuracyChecker.offer`)."""

    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.offered: list[Request] = []

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        code = frame.f_code
        if event == "call" and code.co_filename == accuracy_check.__file__:
            if code.co_qualname == "AccuracyChecker.offer":
                self.offered.append(frame.f_locals["request"])
            return
        if event != "return" or code.co_filename != lifecycle.__file__:
            return
        if code.co_qualname == "Request.__init__":
            self.requests.append(frame.f_locals["self"])


@pytest.mark.parametrize("name", ["served", "shed", "invalid", "no-table"])
async def test_either_door_ends_its_request_the_same_way(
    make_harness: MakeHarness, name: str
) -> None:
    """Each door creates one `Request` per request and ends it with the one `Finish`
    (`serving/lifecycle.py`): counted once under the same outcome, and freed (its tenant's
    share, its slot, the queue told) exactly when it was decided. The HTTP door's finish
    offers a served request's answer to the live checks exactly once, and a shed, invalid or
    failed one never; gateway mode never sees an answer, so it offers none."""
    case, load, outcome = OUTCOME_CASES[name]
    table = None if name == "no-table" else load_sensitive_table()
    ends = []
    offers: list[list[Request]] = []
    for door in ("http", "gateway"):
        created = Created()
        sys.setprofile(created)
        try:
            if door == "http":
                await second_outcome_http(make_harness, table, case, load)
            else:
                await second_outcome_gateway(table, case, load)
        finally:
            sys.setprofile(None)
        last = created.requests[-1]
        await eventually(lambda: last.counted, what=f"{door}'s request counted")  # noqa: B023
        ends.append((len(created.requests), last.outcome, last.is_decided, last.ended))
        offers.append([r for r in created.offered if r is last])
        assert all(r in created.requests for r in created.offered)
    decided = name == "served"
    assert ends[0] == (2, RequestOutcome(outcome), decided, decided)
    assert ends[1] == ends[0]
    assert [len(o) for o in offers] == [1 if decided else 0, 0]
