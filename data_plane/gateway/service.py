"""The ext_proc gRPC service: `envoy.service.ext_proc.v3.ExternalProcessor/Process` on
grpc.aio, one `Exchange` per stream, each request counted in the data plane's metrics. A
request is over, for the in-flight counts, when its stream ends at the latest (a stream
Envoy cancels while its request waits in the queue takes it out of the queue at once).

The method is registered by name with the messages of `data_plane.gateway.protos` (what a
generated `_pb2_grpc` module would do, without one)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import grpc

from data_plane.gateway import protos
from data_plane.gateway.exchange import Exchange
from data_plane.gateway.router import GatewayRouter
from data_plane.telemetry.metrics import DataPlaneMetrics, RequestOutcome, Route
from data_plane.telemetry.request_outcome import outcome_of


@dataclass(frozen=True, slots=True)
class ServiceConfig:
    default_body_mode: int  # when Envoy's first message carries no protocol_config
    max_body_bytes: int


class ExternalProcessor:
    """Answers each stream's messages in order; a stream is one client request."""

    def __init__(
        self,
        router: GatewayRouter,
        metrics: DataPlaneMetrics,
        config: ServiceConfig,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._router = router
        self._metrics = metrics
        self._config = config
        self._clock = clock

    async def Process(  # noqa: N802  (the gRPC method's name)
        self, request_iterator: AsyncIterator[Any], context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Any]:
        exchange = Exchange(
            self._router, self._config.default_body_mode, self._config.max_body_bytes
        )
        started = self._clock()
        counted = False
        try:
            async for request in request_iterator:
                for response in await exchange.on_message(request):
                    yield response
                if not counted and (exchange.outcome is not None or exchange.error is not None):
                    counted = True
                    self._count(exchange, self._clock() - started)
        finally:  # the stream ended (Envoy closed it, or cancelled it): so did the request
            exchange.end()

    def _count(self, exchange: Exchange, duration_s: float) -> None:
        route = Route.CHAT_COMPLETIONS if exchange.kind == "chat" else Route.COMPLETIONS
        outcome = exchange.outcome or RequestOutcome.OK
        if exchange.error is not None:
            outcome = outcome_of(exchange.error)
        self._metrics.observe_request(route, outcome, duration_s)


async def start_server(
    processor: ExternalProcessor, host: str, port: int
) -> tuple[grpc.aio.Server, int]:
    """A started grpc.aio server on host:port (0 = any free port); returns it and the port."""
    server = grpc.aio.server()
    process = grpc.stream_stream_rpc_method_handler(
        processor.Process,
        request_deserializer=protos.ProcessingRequest.FromString,
        response_serializer=protos.ProcessingResponse.SerializeToString,
    )
    handler = grpc.method_handlers_generic_handler(protos.SERVICE, {"Process": process})
    server.add_generic_rpc_handlers((handler,))
    bound = server.add_insecure_port(f"{host}:{port}")
    await server.start()
    return server, bound
