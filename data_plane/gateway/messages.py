"""`ProcessingResponse` builders (envoy.service.ext_proc.v3, `data_plane.gateway.protos`).

Header values go out as `raw_value` bytes, the field Envoy's ext_proc filter reads for
mutations. Everything protobuf-shaped in this package is built here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from data_plane.errors import RouterError, Shed, to_openai_error
from data_plane.gateway import protos as ext_proc

ProcessingResponse = Any  # ext_proc.ProcessingResponse: classes built at run time, no stubs
_OVERWRITE = ext_proc.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD
# llm-d's header on a request its router dropped (a 429 for a sheddable request).
DROPPED_REASON_HEADER = "x-llm-d-request-dropped-reason"


def header_mutation(headers: Sequence[tuple[str, str]], remove: Sequence[str] = ()) -> Any:
    """Set `headers` (overwriting the client's values) and remove the `remove` names."""
    return ext_proc.HeaderMutation(
        set_headers=[
            ext_proc.HeaderValueOption(
                header=ext_proc.HeaderValue(key=name, raw_value=value.encode()),
                append_action=_OVERWRITE,
            )
            for name, value in headers
        ],
        remove_headers=list(remove),
    )


def continue_headers(*, request: bool = True) -> ProcessingResponse:
    """Headers go on unchanged."""
    if request:
        return ext_proc.ProcessingResponse(request_headers=ext_proc.HeadersResponse())
    return ext_proc.ProcessingResponse(response_headers=ext_proc.HeadersResponse())


def passed_headers(remove: Sequence[str]) -> ProcessingResponse:
    """A request Gearbox does not route: its headers go on without the `remove` names (the
    client's copies of the headers Gearbox sets), the route re-picked without them (Envoy
    picked it on the headers as they came)."""
    common = ext_proc.CommonResponse(
        header_mutation=header_mutation((), remove), clear_route_cache=True
    )
    return ext_proc.ProcessingResponse(request_headers=ext_proc.HeadersResponse(response=common))


def continue_body(*, request: bool = True) -> ProcessingResponse:
    """A buffered body goes on unchanged."""
    if request:
        return ext_proc.ProcessingResponse(request_body=ext_proc.BodyResponse())
    return ext_proc.ProcessingResponse(response_body=ext_proc.BodyResponse())


def echo_chunk(chunk: bytes, end_of_stream: bool, *, request: bool = True) -> ProcessingResponse:
    """A full-duplex streamed chunk sent on as it came (the processor owns the stream)."""
    body = ext_proc.BodyResponse(
        response=ext_proc.CommonResponse(
            body_mutation=ext_proc.BodyMutation(
                streamed_response=ext_proc.StreamedBodyResponse(
                    body=chunk, end_of_stream=end_of_stream
                )
            )
        )
    )
    if request:
        return ext_proc.ProcessingResponse(request_body=body)
    return ext_proc.ProcessingResponse(response_body=body)


def continue_trailers() -> ProcessingResponse:
    return ext_proc.ProcessingResponse(request_trailers=ext_proc.TrailersResponse())


def routed_headers(
    headers: Sequence[tuple[str, str]], remove: Sequence[str] = ()
) -> ProcessingResponse:
    """Full-duplex mode: the held request headers, with ours set (the client's copies of
    those we do not set removed) and the route re-picked."""
    common = ext_proc.CommonResponse(
        header_mutation=header_mutation(headers, remove), clear_route_cache=True
    )
    return ext_proc.ProcessingResponse(request_headers=ext_proc.HeadersResponse(response=common))


def routed_buffered_body(
    headers: Sequence[tuple[str, str]], body: bytes, remove: Sequence[str] = ()
) -> ProcessingResponse:
    """Buffered mode: the body replaced, and (allowed while the body is buffered) the headers
    set, the client's copies of those we do not set removed, and the route re-picked."""
    common = ext_proc.CommonResponse(
        header_mutation=header_mutation(headers, remove),
        body_mutation=ext_proc.BodyMutation(body=body),
        clear_route_cache=True,
    )
    return ext_proc.ProcessingResponse(request_body=ext_proc.BodyResponse(response=common))


def routed_streamed_body(body: bytes) -> ProcessingResponse:
    """Full-duplex mode: the whole rewritten body as the stream's one and last chunk."""
    return echo_chunk(body, True)


def immediate_error(err: RouterError) -> ProcessingResponse:
    """Envoy answers the client at once with the OpenAI-style error; no upstream is called.
    A shed request (429) also says so in llm-d's dropped-reason header."""
    answer = to_openai_error(err)
    headers = [("content-type", "application/json"), *((k.lower(), v) for k, v in answer.headers)]
    if isinstance(err, Shed):
        headers.append((DROPPED_REASON_HEADER, err.code))
    return ext_proc.ProcessingResponse(
        immediate_response=ext_proc.ImmediateResponse(
            status=ext_proc.HttpStatus(code=answer.status),
            headers=header_mutation(headers),
            body=json.dumps(answer.body).encode(),
            details=f"gearbox_{err.code}",
        )
    )
