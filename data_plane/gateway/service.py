"""The ext_proc gRPC service: `envoy.service.ext_proc.v3.ExternalProcessor/Process` on
grpc.aio, one `Exchange` per stream; each stream's `Request` is counted when it is answered
and ended by the door's `serving.lifecycle.Finish`, as in the HTTP door. A request is over,
for the in-flight counts, when its stream ends at the latest (a stream Envoy cancels while
its request waits in the queue takes it out of the queue at once).

The method is registered by name with the messages of `data_plane.gateway.protos` (what a
generated `_pb2_grpc` module would do, without one)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc

from data_plane.gateway import protos
from data_plane.gateway.exchange import Exchange, Waiting
from data_plane.gateway.messages import ProcessingResponse
from data_plane.gateway.router import GatewayRouter
from data_plane.serving.lifecycle import Finish, Request
from data_plane.telemetry.metrics import DataPlaneMetrics, RequestOutcome, Route

Responses = list[ProcessingResponse]


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
        self._config = config
        door = router.door
        self._finish = Finish(metrics, door.step, door.queue, clock)

    async def Process(  # noqa: N802  (the gRPC method's name)
        self, request_iterator: AsyncIterator[Any], context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Any]:
        config = self._config
        request = Request("", Route.CHAT_COMPLETIONS, self._finish.clock())
        exchange = Exchange(
            self._router, (config.default_body_mode, config.max_body_bytes), request, self._finish
        )
        waited = False
        reader = _Reader(request_iterator)
        try:
            while (message := await reader.next()) is not None:
                answer = exchange.on_message(message)
                if isinstance(answer, Waiting):  # counted or queued: watch the stream meanwhile
                    waited = True
                    responses = await reader.unless_closed(answer.responses()) or []
                else:
                    responses = answer
                if exchange.answered is not None:  # counted once, when it is answered
                    self._finish.count(request, exchange.answered)
                for response in responses:
                    yield response
        finally:  # the stream ended (Envoy closed it, or cancelled it): so did the request
            reader.close()
            # one that went while it waited in the queue is counted as cancelled
            self._finish.finish(request, RequestOutcome.CANCELLED if waited else None)


class _Reader:
    """Envoy's messages on one stream. While a request waits in the queue the next one is
    read ahead: Envoy half-closes the stream when the client goes (and resets it only
    later), and a half-closed stream ends the wait at once."""

    __slots__ = ("_ahead", "_messages")

    def __init__(self, messages: AsyncIterator[Any]) -> None:
        self._messages = aiter(messages)
        self._ahead: asyncio.Task[Any] | None = None

    async def next(self) -> Any:
        """The next message; None once Envoy closed its side."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            return await ahead
        return await self._read()

    async def unless_closed(self, work: Awaitable[Responses]) -> Responses | None:
        """`work`'s responses, or None when the stream closes first (`work` is cancelled:
        a request waiting in the queue leaves it). A message that comes meanwhile is kept
        for `next`."""
        job = asyncio.ensure_future(work)
        try:
            if self._ahead is None:
                self._ahead = asyncio.ensure_future(self._read())
            await asyncio.wait((job, self._ahead), return_when=asyncio.FIRST_COMPLETED)
            if job.done() or not self._ahead.done() or self._ahead.result() is not None:
                return await job
        finally:  # closed first, or this stream's handler cancelled (Envoy reset it)
            if not job.done():
                job.cancel()
                await asyncio.gather(job, return_exceptions=True)
        return None

    def close(self) -> None:
        if self._ahead is not None:
            self._ahead.cancel()

    async def _read(self) -> Any:
        try:
            return await anext(self._messages)
        except StopAsyncIteration:
            return None


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
