"""The ext_proc gateway mode driven by a real gRPC client over loopback: real
`ProcessingRequest` messages (headers, buffered and full-duplex streamed bodies) in, the
`ProcessingResponse` mutations checked (docs/gateway.md)."""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from data_plane.decision.compile import compile_table
from data_plane.decision_step import Admission, DecisionStep, StepParts, default_admission
from data_plane.domain import CompiledTable, HealthView
from data_plane.gateway import protos as ext_proc
from data_plane.gateway.in_flight import GatewayDoor
from data_plane.gateway.router import GatewayRouter, gateway_router
from data_plane.gateway.service import ExternalProcessor, ServiceConfig, start_server
from data_plane.request.identity import Rights
from data_plane.resilience.endpoint_load import LoadTracker
from data_plane.table_store import TableStore
from data_plane.telemetry.metrics import DataPlaneMetrics
from data_plane.telemetry.tenants import TenantLabels
from tests.support.extproc_client import ExternalProcessorStub
from tests.unit.data_plane.tables import entry, fleet, table

MODES = ext_proc.ProcessingMode
BUFFERED, STREAMED, FULL_DUPLEX = MODES.BUFFERED, MODES.STREAMED, MODES.FULL_DUPLEX_STREAMED
PAIR_HEADER = "x-gearbox-pair"
CHAT = {
    "model": "llama@fp8",
    "max_tokens": 100,
    "messages": [{"role": "user", "content": "Say hello to the gateway"}],
}


@dataclass
class Gateway:
    stub: Any
    store: TableStore
    metrics: DataPlaneMetrics

    def metric(self, name: str, **labels: str) -> float:
        value = self.metrics.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value


@pytest.fixture
async def gateway() -> AsyncIterator[Gateway]:
    store, metrics = TableStore(), DataPlaneMetrics("test", "test")
    store.swap(fleet())
    router = gateway_router(store, metrics, random.Random(7), PAIR_HEADER)
    processor = ExternalProcessor(router, metrics, ServiceConfig(BUFFERED, 64 * 1024))
    server, port = await start_server(processor, "127.0.0.1", 0)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield Gateway(ExternalProcessorStub(channel), store, metrics)
    finally:
        await channel.close()
        await server.stop(None)


def headers_message(
    headers: dict[str, str] | Sequence[tuple[str, str]],
    *,
    mode: int | None = FULL_DUPLEX,
    path: str = "/v1/chat/completions",
    method: str = "POST",
    end_of_stream: bool = False,
) -> Any:
    pairs = list(headers.items()) if isinstance(headers, dict) else list(headers)
    pairs = [(":path", path), (":method", method), ("content-type", "application/json"), *pairs]
    header_map = ext_proc.HeaderMap(
        headers=[ext_proc.HeaderValue(key=k, raw_value=v.encode()) for k, v in pairs]
    )
    message = ext_proc.ProcessingRequest(
        request_headers=ext_proc.HttpHeaders(headers=header_map, end_of_stream=end_of_stream)
    )
    if mode is not None:
        message.protocol_config.CopyFrom(ext_proc.ProtocolConfiguration(request_body_mode=mode))
    return message


def body_message(chunk: bytes, end_of_stream: bool) -> Any:
    return ext_proc.ProcessingRequest(
        request_body=ext_proc.HttpBody(body=chunk, end_of_stream=end_of_stream)
    )


async def exchange(gw: Gateway, messages: Sequence[Any]) -> list[Any]:
    """Send every message, close the sending side, and collect every response."""
    call = gw.stub.Process()
    for message in messages:
        await call.write(message)
    await call.done_writing()
    out = []
    while (response := await call.read()) is not grpc.aio.EOF:
        out.append(response)
    return out


def set_headers(common: Any) -> dict[str, str]:
    return {o.header.key: o.header.raw_value.decode() for o in common.header_mutation.set_headers}


def error_of(response: Any) -> tuple[int, dict[str, Any], dict[str, str]]:
    assert response.WhichOneof("response") == "immediate_response"
    immediate = response.immediate_response
    headers = {o.header.key: o.header.raw_value.decode() for o in immediate.headers.set_headers}
    return immediate.status.code, json.loads(immediate.body), headers


async def test_buffered_body_is_rewritten_and_the_pair_header_set(gateway: Gateway) -> None:
    raw = json.dumps(CHAT, indent=1).encode()  # odd spacing: only `model` may change
    responses = await exchange(
        gateway,
        [headers_message({"x-latency-budget-ms": "5000"}, mode=BUFFERED), body_message(raw, True)],
    )
    assert [r.WhichOneof("response") for r in responses] == ["request_headers", "request_body"]
    assert not responses[0].request_headers.response.HasField("header_mutation")
    common = responses[1].request_body.response
    new_body = common.body_mutation.body
    assert new_body == raw.replace(b'"llama@fp8"', b'"served-llama-fp8"')
    headers = set_headers(common)
    assert headers[PAIR_HEADER] == "llama@fp8"
    assert headers["x-gearbox-route-reason"] == "cheapest_feasible"
    assert headers["content-length"] == str(len(new_body))
    assert common.clear_route_cache is True
    assert gateway.metric(
        "gearbox_requests_total", route="chat_completions", outcome="ok"
    ) == pytest.approx(1.0)


async def test_full_duplex_answers_only_after_the_last_chunk(gateway: Gateway) -> None:
    raw = json.dumps({**CHAT, "model": "auto"}).encode()
    responses = await exchange(
        gateway,
        [
            headers_message({}, mode=FULL_DUPLEX),
            body_message(raw[:10], False),
            body_message(raw[10:25], False),
            body_message(raw[25:], True),
        ],
    )
    # Nothing for the headers or the first chunks: the held headers go first, then the body.
    assert [r.WhichOneof("response") for r in responses] == ["request_headers", "request_body"]
    common = responses[0].request_headers.response
    headers = set_headers(common)
    assert common.clear_route_cache is True
    chosen = headers[PAIR_HEADER]
    assert chosen in {p.pair for p in fleet().pairs}
    streamed = responses[1].request_body.response.body_mutation.streamed_response
    assert streamed.end_of_stream is True
    assert json.loads(streamed.body)["model"] == "served-" + chosen.replace("@", "-")
    assert headers["content-length"] == str(len(streamed.body))


async def test_the_decision_is_the_routing_cores(gateway: Gateway) -> None:
    """A floor only the precise pair meets sends the request to that pair's pool."""
    body = json.dumps({**CHAT, "model": "llama"}).encode()
    responses = await exchange(
        gateway,
        [headers_message({"x-min-accuracy": "0.88"}), body_message(body, True)],
    )
    assert set_headers(responses[0].request_headers.response)[PAIR_HEADER] == "llama@bf16"


async def test_latency_budget_becomes_the_slo_headers(gateway: Gateway) -> None:
    budget = {"x-latency-budget-ms": "2000", "x-ttft-budget-ms": "500"}
    responses = await exchange(
        gateway, [headers_message(budget), body_message(json.dumps(CHAT).encode(), True)]
    )
    headers = set_headers(responses[0].request_headers.response)
    # llm-d's names, and the same values under the deprecated x-slo-* aliases
    assert headers["x-llm-d-slo-ttft-ms"] == headers["x-slo-ttft-ms"] == "500"
    # (2.0 s - 0.5 s for the first token) over max_tokens = 100 output tokens
    assert headers["x-llm-d-slo-tpot-ms"] == headers["x-slo-tpot-ms"] == "15"


async def test_no_budget_sends_no_slo_header(gateway: Gateway) -> None:
    responses = await exchange(
        gateway, [headers_message({}), body_message(json.dumps(CHAT).encode(), True)]
    )
    headers = set_headers(responses[0].request_headers.response)
    assert not {"x-slo-ttft-ms", "x-slo-tpot-ms", "x-llm-d-slo-ttft-ms"} & set(headers)


@pytest.mark.parametrize("mode", [BUFFERED, FULL_DUPLEX])
async def test_client_copies_of_the_headers_gearbox_sets_never_reach_the_picker(
    gateway: Gateway, mode: int
) -> None:
    """On the old code a client's own x-slo-* (or x-gearbox-pair) went on to the endpoint
    picker whenever Gearbox set none: now every such name Gearbox does not set is removed."""
    forged = {
        "x-slo-ttft-ms": "1",
        "x-llm-d-slo-tpot-ms": "1",
        "x-gearbox-route-reason": "forged",
    }
    responses = await exchange(
        gateway,
        [headers_message(forged, mode=mode), body_message(json.dumps(CHAT).encode(), True)],
    )
    routed = responses[-1] if mode == BUFFERED else responses[0]
    common = (routed.request_body if mode == BUFFERED else routed.request_headers).response
    removed = set(common.header_mutation.remove_headers)
    assert {
        "x-slo-ttft-ms",
        "x-slo-tpot-ms",
        "x-llm-d-slo-ttft-ms",
        "x-llm-d-slo-tpot-ms",
    } <= removed
    set_here = set_headers(common)
    assert set_here["x-gearbox-route-reason"] != "forged"  # set: overwritten, not removed
    assert PAIR_HEADER in set_here
    assert PAIR_HEADER not in removed


@pytest.mark.parametrize(
    ("headers", "body", "status", "code", "param"),
    [
        ({"x-latency-budget-ms": "soon"}, CHAT, 400, "invalid_budget", "X-Latency-Budget-Ms"),
        (
            [("x-min-accuracy", "0.5"), ("x-min-accuracy", "0.9")],
            CHAT,
            400,
            "invalid_budget",
            "X-Min-Accuracy",
        ),
        ({}, {**CHAT, "max_tokens": "many"}, 400, "invalid_field", "max_tokens"),
        ({}, {**CHAT, "model": "gpt-9"}, 404, "model_not_found", "model"),
        (
            {"x-latency-budget-ms": "1", "x-budget-mode": "strict"},
            CHAT,
            400,
            "budget_infeasible",
            "X-Latency-Budget-Ms",
        ),
    ],
    ids=["bad-budget", "repeated-budget", "bad-field", "unknown-model", "strict-infeasible"],
)
async def test_invalid_or_infeasible_requests_get_an_immediate_openai_error(
    gateway: Gateway, headers: Any, body: Any, status: int, code: str, param: str
) -> None:
    responses = await exchange(
        gateway, [headers_message(headers), body_message(json.dumps(body).encode(), True)]
    )
    assert len(responses) == 1
    got_status, error, reply_headers = error_of(responses[0])
    assert (got_status, error["error"]["code"], error["error"]["param"]) == (status, code, param)
    assert error["error"]["type"] == "invalid_request_error"
    assert reply_headers["content-type"] == "application/json"
    outcome = {"model_not_found": "no_route", "budget_infeasible": "budget_infeasible"}
    assert gateway.metric(
        "gearbox_requests_total",
        route="chat_completions",
        outcome=outcome.get(code, "invalid_request"),
    ) == pytest.approx(1.0)
    no_route = {"model_not_found": "unknown_model", "budget_infeasible": "budget_infeasible"}
    if code in no_route:
        assert gateway.metric("gearbox_no_route_total", reason=no_route[code]) == 1.0
        assert gateway.metric("gearbox_routing_decision_duration_seconds_count") == 1.0


async def test_undecodable_body_is_a_400_naming_json(gateway: Gateway) -> None:
    responses = await exchange(
        gateway, [headers_message({}, mode=BUFFERED), body_message(b'{"model": ', True)]
    )
    status, error, _ = error_of(responses[-1])
    assert (status, error["error"]["code"]) == (400, "invalid_json")


async def test_a_request_without_a_body_is_refused(gateway: Gateway) -> None:
    responses = await exchange(gateway, [headers_message({}, end_of_stream=True)])
    status, error, _ = error_of(responses[0])
    assert (status, error["error"]["code"]) == (400, "invalid_json")


async def test_a_body_over_the_limit_is_a_413(gateway: Gateway) -> None:
    chunk = b" " * (40 * 1024)
    responses = await exchange(
        gateway,
        [headers_message({}), body_message(chunk, False), body_message(chunk, False)],
    )
    status, error, _ = error_of(responses[0])
    assert (status, error["error"]["code"]) == (413, "payload_too_large")


async def test_no_table_yet_is_a_503_with_retry_after() -> None:
    store, metrics = TableStore(), DataPlaneMetrics("test", "test")
    router = gateway_router(store, metrics, random.Random(1), PAIR_HEADER)
    processor = ExternalProcessor(router, metrics, ServiceConfig(BUFFERED, 1024))
    server, port = await start_server(processor, "127.0.0.1", 0)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        gw = Gateway(ExternalProcessorStub(channel), store, metrics)
        responses = await exchange(
            gw, [headers_message({}), body_message(json.dumps(CHAT).encode(), True)]
        )
    await server.stop(None)
    status, error, headers = error_of(responses[0])
    assert (status, error["error"]["code"], headers["retry-after"]) == (
        503,
        "no_healthy_upstream",
        "1",
    )


async def test_other_paths_pass_through_untouched(gateway: Gateway) -> None:
    responses = await exchange(
        gateway,
        [headers_message({}, path="/v1/models", method="GET", mode=BUFFERED, end_of_stream=True)],
    )
    assert len(responses) == 1
    assert responses[0].WhichOneof("response") == "request_headers"
    assert not responses[0].request_headers.response.HasField("header_mutation")


FORGED = {
    PAIR_HEADER: "llama@fp16",
    "x-llm-d-slo-ttft-ms": "1",
    "x-slo-tpot-ms": "1",
    "x-gearbox-route-reason": "forged",
    "x-gearbox-table-version": "9",
}


@pytest.mark.parametrize(
    ("path", "method", "mode"),
    [
        ("/v1/responses", "POST", FULL_DUPLEX),
        ("/v1/embeddings", "POST", BUFFERED),
        ("/v1/models", "GET", BUFFERED),
        ("/v1/chat/completions", "GET", FULL_DUPLEX),
        ("/v1/chat/completions/", "POST", FULL_DUPLEX),  # the engine redirects it
    ],
)
async def test_a_passed_request_loses_the_clients_copies_of_the_managed_headers(
    gateway: Gateway, path: str, method: str, mode: int
) -> None:
    """On 95376ca these went on untouched: the HTTPRoutes matched the client's own pair header
    on every /v1/ path, and the picker read its SLO. Now they are removed and the route is
    re-picked without them; a header Gearbox does not manage stays."""
    sent = {**FORGED, "x-request-id": "r1"}
    responses = await exchange(
        gateway, [headers_message(sent, path=path, method=method, mode=mode, end_of_stream=True)]
    )
    assert [r.WhichOneof("response") for r in responses] == ["request_headers"]
    common = responses[0].request_headers.response
    assert set(common.header_mutation.remove_headers) == set(FORGED)
    assert not common.header_mutation.set_headers
    assert common.clear_route_cache


@pytest.mark.parametrize(
    "path",
    [
        "/v1/chat%2Fcompletions",
        "/v1/%63hat/completions",
        "/v1//chat/completions",
        "/v1/./completions?stream=1",
    ],
)
async def test_a_routed_path_spelt_another_way_is_a_400_naming_it(
    gateway: Gateway, path: str
) -> None:
    """On 95376ca `/v1/chat%2Fcompletions` passed through to the engine, which decodes it to
    its chat endpoint: a chat request with no decision. Now it is refused, naming the path."""
    responses = await exchange(gateway, [headers_message(FORGED, path=path, mode=FULL_DUPLEX)])
    status, error, _ = error_of(responses[0])
    assert (status, error["error"]["code"], error["error"]["param"]) == (
        400,
        "invalid_path",
        ":path",
    )
    assert path in error["error"]["message"]


async def test_other_methods_pass_through_untouched(gateway: Gateway) -> None:
    responses = await exchange(
        gateway, [headers_message({}, method="GET", mode=BUFFERED, end_of_stream=True)]
    )
    assert [r.WhichOneof("response") for r in responses] == ["request_headers"]
    assert not responses[0].request_headers.response.HasField("header_mutation")


async def test_trailers_end_a_full_duplex_body_and_pass_through(gateway: Gateway) -> None:
    raw = json.dumps(CHAT).encode()
    trailers = ext_proc.ProcessingRequest(request_trailers=ext_proc.HttpTrailers())
    responses = await exchange(gateway, [headers_message({}), body_message(raw, False), trailers])
    kinds = [r.WhichOneof("response") for r in responses]
    assert kinds == ["request_headers", "request_body", "request_trailers"]
    assert set_headers(responses[0].request_headers.response)[PAIR_HEADER] == "llama@fp8"
    assert not responses[2].request_trailers.HasField("header_mutation")


async def test_a_passed_through_full_duplex_body_is_echoed(gateway: Gateway) -> None:
    responses = await exchange(
        gateway,
        [
            headers_message({}, path="/v1/embeddings"),
            body_message(b'{"input": ', False),
            body_message(b'"x"}', True),
        ],
    )
    echoed = [r.request_body.response.body_mutation.streamed_response for r in responses[1:]]
    assert [(c.body, c.end_of_stream) for c in echoed] == [(b'{"input": ', False), (b'"x"}', True)]


async def test_a_mode_that_cannot_route_is_a_500_naming_it(gateway: Gateway) -> None:
    responses = await exchange(gateway, [headers_message({}, mode=STREAMED)])
    status, error, _ = error_of(responses[0])
    assert status == 500
    assert "STREAMED" in error["error"]["message"]
    assert error["error"]["code"] == "ext_proc_mode_unsupported"


async def test_without_protocol_config_the_configured_mode_applies(gateway: Gateway) -> None:
    """The fixture's default is BUFFERED: the headers are answered at once."""
    responses = await exchange(
        gateway, [headers_message({}, mode=None), body_message(json.dumps(CHAT).encode(), True)]
    )
    assert [r.WhichOneof("response") for r in responses] == ["request_headers", "request_body"]
    assert set_headers(responses[1].request_body.response)[PAIR_HEADER] == "llama@fp8"


async def test_a_table_swap_reaches_the_next_stream(gateway: Gateway) -> None:
    gateway.store.swap(compile_table(table([entry("qwen", "bf16")], version=42)))
    body = json.dumps({**CHAT, "model": "qwen@bf16"}).encode()
    responses = await exchange(gateway, [headers_message({}), body_message(body, True)])
    headers = set_headers(responses[0].request_headers.response)
    assert (headers["x-gearbox-table-version"], headers[PAIR_HEADER]) == ("42", "qwen@bf16")


class LoadedEngines:
    """A health source whose engines are all busy (gateway mode's own reads the scrape and
    its routed requests: `test_the_requests_it_routes_count_only_until_their_stream_ends`)."""

    def __init__(self, table: CompiledTable, load: float) -> None:
        ids = (e.id for p in table.pairs for e in p.endpoints)
        self._view = HealthView(load=dict.fromkeys(ids, load))

    def view(self) -> HealthView:
        return self._view

    def set_ladder(self, state: frozenset[tuple[str, str]]) -> None:
        pass

    def retry_after_s(self) -> float:
        return 1.0


def gateway_rights(priority_header_trusted: bool = False) -> Admission:
    """Gateway mode's admission (`wiring.admission(gateway=True)`): llm-d's objective header
    is the gateway's; X-Priority too when the deployment says its gateway sets it."""
    rights = Rights(objective_trusted=True, priority_header_trusted=priority_header_trusted)
    return Admission(TenantLabels(20), rights)


async def test_a_shed_request_is_a_429_with_llm_ds_dropped_reason() -> None:
    # llama@fp8 with 100 output tokens: 1.25 s + 0.11 s per request in flight; 2 s fits
    # unloaded, not beside 20 in flight.
    store, metrics = TableStore(), DataPlaneMetrics("test", "test")
    store.swap(busy := fleet())
    loaded = LoadedEngines(busy, 20.0)
    admission = gateway_rights(priority_header_trusted=True)
    step = DecisionStep(StepParts(store, loaded, metrics, random.Random(7), admission=admission))
    processor = ExternalProcessor(
        GatewayRouter(GatewayDoor(step), PAIR_HEADER),
        metrics,
        ServiceConfig(BUFFERED, 64 * 1024),
    )
    server, port = await start_server(processor, "127.0.0.1", 0)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    gw = Gateway(ExternalProcessorStub(channel), store, metrics)
    body = json.dumps(CHAT).encode()
    try:
        budget = {"x-latency-budget-ms": "2000"}
        responses = await exchange(gw, [headers_message(budget), body_message(body, True)])
        status, error, headers = error_of(responses[-1])
        assert (status, error["error"]["code"]) == (429, "router_overloaded")
        assert headers["x-llm-d-request-dropped-reason"] == "router_overloaded"
        assert int(headers["retry-after"]) >= 1
        assert headers["x-should-retry"] == "true"
        assert (headers["x-gearbox-priority"], headers["x-gearbox-tenant"]) == (
            "standard",
            "anonymous",
        )
        critical = {**budget, "x-priority": "critical"}
        responses = await exchange(gw, [headers_message(critical), body_message(body, True)])
        assert set_headers(responses[0].request_headers.response)[PAIR_HEADER] == "llama@fp8"
    finally:
        await channel.close()
        await server.stop(None)


async def test_llm_ds_objective_header_sets_the_class_admission_judges() -> None:
    # As above: 2 s misses beside 20 in flight. The objective mapped to `critical` is routed,
    # an objective the policy does not map gets the default class and is shed.
    store, metrics = TableStore(), DataPlaneMetrics("test", "test")
    store.swap(busy := fleet(policy={"objectives": {"premium-traffic": "critical"}}))
    loaded, admission = LoadedEngines(busy, 20.0), gateway_rights()
    step = DecisionStep(StepParts(store, loaded, metrics, random.Random(7), admission=admission))
    processor = ExternalProcessor(
        GatewayRouter(GatewayDoor(step), PAIR_HEADER),
        metrics,
        ServiceConfig(BUFFERED, 64 * 1024),
    )
    server, port = await start_server(processor, "127.0.0.1", 0)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    gw = Gateway(ExternalProcessorStub(channel), store, metrics)
    body = json.dumps(CHAT).encode()
    budget = {"x-latency-budget-ms": "2000"}
    try:
        premium = {**budget, "x-llm-d-inference-objective": "premium-traffic"}
        responses = await exchange(gw, [headers_message(premium), body_message(body, True)])
        common = responses[0].request_headers.response
        assert set_headers(common)[PAIR_HEADER] == "llama@fp8"
        assert "x-llm-d-inference-objective" not in common.header_mutation.remove_headers
        old_name = {**budget, "x-gateway-inference-objective": "premium-traffic"}
        responses = await exchange(gw, [headers_message(old_name), body_message(body, True)])
        assert set_headers(responses[0].request_headers.response)[PAIR_HEADER] == "llama@fp8"
        other = {**budget, "x-llm-d-inference-objective": "someone-elses"}
        responses = await exchange(gw, [headers_message(other), body_message(body, True)])
        assert error_of(responses[-1])[0] == 429
        # X-Priority is a client's claim here (ADMISSION_PRIORITY_HEADER_TRUSTED off): it cannot
        # raise a request above its class (issue 32: on 95376ca this one was routed).
        claimed = {**budget, "x-priority": "critical"}
        responses = await exchange(gw, [headers_message(claimed), body_message(body, True)])
        status, _, headers = error_of(responses[-1])
        assert (status, headers["x-gearbox-priority"]) == (429, "standard")
    finally:
        await channel.close()
        await server.stop(None)


async def test_the_requests_it_routes_count_only_until_their_stream_ends() -> None:
    """A routed request counts until its answer or its stream ends (docs/gateway.md, "Flow
    control"): 20 requests routed to llama@fp8 whose streams each closed at once leave it
    unloaded for the next decision; a scrape of 20 in flight at its endpoint sheds."""
    store, metrics, tracker = TableStore(), DataPlaneMetrics("test", "test"), LoadTracker()
    store.swap(table_ := fleet())
    router = gateway_router(
        store, metrics, random.Random(7), PAIR_HEADER, default_admission(), tracker
    )
    processor = ExternalProcessor(router, metrics, ServiceConfig(BUFFERED, 64 * 1024))
    server, port = await start_server(processor, "127.0.0.1", 0)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    gw = Gateway(ExternalProcessorStub(channel), store, metrics)
    body = json.dumps(CHAT).encode()
    budget = {"x-latency-budget-ms": "2000"}
    try:
        for _ in range(20):
            responses = await exchange(gw, [headers_message(budget), body_message(body, True)])
            assert set_headers(responses[0].request_headers.response)[PAIR_HEADER] == "llama@fp8"
        (fp8,) = (p for p in table_.pairs if p.pair == "llama@fp8")
        for endpoint in fp8.endpoints:
            tracker.set_queue_depth(endpoint.id, 20.0)
        responses = await exchange(gw, [headers_message(budget), body_message(body, True)])
        assert error_of(responses[-1])[0] == 429
    finally:
        await channel.close()
        await server.stop(None)
