"""Envoy's side of the ext_proc stream, for tests: the `Process` method called by name with
the messages of `data_plane.gateway.protos` (what a generated stub would do)."""

from __future__ import annotations

from typing import Any

import grpc

from data_plane.gateway import protos


class ExternalProcessorStub:
    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.Process: Any = channel.stream_stream(
            protos.PROCESS_METHOD,
            request_serializer=protos.ProcessingRequest.SerializeToString,
            response_deserializer=protos.ProcessingResponse.FromString,
        )
