"""One ext_proc stream (one HTTP request through Envoy): ProcessingRequests in, the
ProcessingResponses to send back out.

Two request body modes route (docs/gateway.md, "Processing modes"):

- BUFFERED: the headers are answered at once (unchanged); the whole body arrives in one
  message and its answer replaces the body and sets the headers (allowed while Envoy holds
  a buffered body), with `clear_route_cache` so the HTTPRoute for the chosen pair matches.
- FULL_DUPLEX_STREAMED: nothing is answered until the body's last chunk; then the headers
  answer (mutations, `clear_route_cache`) and the rewritten body as one streamed chunk.

A body large enough to be counted by its alias's tokenizer (`PromptCounter`, as the HTTP door
counts it: docs/data_plane.md, "Prompt size") is counted off the loop before its decision; its
last message is answered once counted. When every pair that meets the request is full, the
request phase's last message is left unanswered while the request waits in the queue
(`gateway.in_flight`); it is answered with the routing headers once decided, or with a 429 at
its deadline or a bound. The response
phase, when the filter sends it, tells when the answer ends (`end`).

Other modes (NONE, STREAMED, BUFFERED_PARTIAL) cannot route on the body before the route is
picked: such a stream is answered with a 500 naming the misconfiguration. Paths other than
the two completions endpoints, and methods other than POST, pass through with only the
client's copies of the headers Gearbox sets removed (the route then re-picked without them);
one of the two endpoints spelt another way (`/v1/chat%2Fcompletions`), which the engine would
serve as that endpoint, is a 400 naming the path.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from enum import Enum
from functools import partial
from typing import Any

from data_plane.asked import Full
from data_plane.errors import Internal, InvalidRequest, PayloadTooLarge, RouterError
from data_plane.gateway import messages, protos
from data_plane.gateway.headers import HeaderList
from data_plane.gateway.messages import ProcessingResponse
from data_plane.gateway.router import GatewayRouter, Routed, respelt_routed_path, routed_kind
from data_plane.request.body import BodyKind
from data_plane.request.prompt_tokens import PromptCount
from data_plane.serving.lifecycle import Ending, Finish, Request
from data_plane.telemetry.metrics import RequestOutcome, Route

logger = logging.getLogger(__name__)

_MODES = protos.ProcessingMode
BUFFERED: int = _MODES.BUFFERED
FULL_DUPLEX_STREAMED: int = _MODES.FULL_DUPLEX_STREAMED
SUPPORTED_MODES = frozenset({BUFFERED, FULL_DUPLEX_STREAMED})
_ROUTES: dict[BodyKind, Route] = {"chat": Route.CHAT_COMPLETIONS, "completions": Route.COMPLETIONS}
_KINDS: dict[Route, BodyKind] = {route: kind for kind, route in _ROUTES.items()}


class Phase(Enum):
    HEADERS = "headers"  # waiting for the request headers
    BODY = "body"  # collecting the body of a request we route
    PASS = "pass"  # not ours: everything goes on unchanged
    DONE = "done"  # routed or answered; later messages go on unchanged


class UnsupportedBodyModeError(RouterError):
    """The filter sends the body in a mode that cannot route on it (a gateway setup error)."""

    default_code = "ext_proc_mode_unsupported"


class Waiting:
    """A request whose answer comes later: its prompt counted off the loop
    (`GatewayRouter.count`), or waiting in the queue; its request phase's last message is
    answered with `responses`, once `work` is done (routed, or refused), then `then`."""

    __slots__ = ("_work", "then")

    def __init__(self, work: Callable[[], Awaitable[list[ProcessingResponse]]]) -> None:
        self._work = work
        self.then: tuple[ProcessingResponse, ...] = ()

    async def responses(self) -> list[ProcessingResponse]:
        return [*await self._work(), *self.then]


Answer = list[ProcessingResponse] | Waiting


def _then(answer: Answer, after: ProcessingResponse) -> Answer:
    """`answer` followed by `after` (once a waiting request has left the queue)."""
    if isinstance(answer, Waiting):
        answer.then = (*answer.then, after)
        return answer
    return [*answer, after]


class Exchange:
    """The state of one stream (its phase, the body modes, the headers and body chunks as
    they come), whose `request` its door created and ends (`finish`: its hold freed at
    `end`); what the request is (its route, what the decision step made of it) is on the
    request, not here. `answered` is set once the request is routed or answered."""

    def __init__(
        self,
        router: GatewayRouter,
        config: tuple[int, int],
        request: Request,
        finish: Finish,
    ) -> None:
        self._router = router
        default_mode, max_body_bytes = config
        self.request = request
        self._end = finish
        self._mode = default_mode
        self._response_mode = 0  # NONE until Envoy says otherwise
        self._max_body_bytes = max_body_bytes
        self._phase = Phase.HEADERS
        self._headers = HeaderList(())
        self._chunks: list[bytes] = []
        self._size = 0
        # Loop time of the request headers, on the queue's clock (`FlowQueue.wait`): its
        # budget runs from then (the HTTP handler reads its own the same way).
        self._arrived = 0.0
        self.answered: Ending | None = None  # what the client was answered with

    @property
    def phase(self) -> Phase:
        return self._phase

    def end(self) -> None:
        """The request is over (its answer ended, or the stream did): it no longer counts."""
        self._end.free(self.request)

    def on_message(self, request: Any) -> Answer:
        """The responses owed for one ProcessingRequest (possibly none yet), or, for the
        request phase's last message of a request every pair is full for, the `Waiting`
        whose `responses` come once it leaves the queue."""
        which = request.WhichOneof("request")
        if request.HasField("protocol_config"):
            self._mode = request.protocol_config.request_body_mode
            self._response_mode = request.protocol_config.response_body_mode
        try:
            return self._dispatch(which, request)
        except RouterError as err:
            return self._answer(err)
        except Exception:  # a bug must not leave Envoy waiting on the stream
            logger.exception("ext_proc exchange failed")
            return self._answer(Internal())

    def _dispatch(self, which: str | None, request: Any) -> Answer:
        match which:
            case "request_headers":
                return self._on_headers(request.request_headers)
            case "request_body":
                return self._on_body(request.request_body)
            case "request_trailers":
                return _then(self._finish(), messages.continue_trailers())
            case "response_headers":
                if request.response_headers.end_of_stream:  # an answer without a body
                    self.end()
                return [messages.continue_headers(request=False)]
            case "response_body":
                if request.response_body.end_of_stream:
                    self.end()
                return [self._pass_response_body(request.response_body)]
            case "response_trailers":
                self.end()
                return []
            case _:  # a message type newer than these protos
                return []

    def _on_headers(self, headers: Any) -> Answer:
        self._arrived = asyncio.get_running_loop().time()
        self._headers = HeaderList.from_proto(headers.headers)
        path = self._headers.get(":path", "")
        kind = routed_kind(path)
        if kind is None and (spelt := respelt_routed_path(path)) is not None:
            raise InvalidRequest(
                f"the path {path!r} is {spelt} spelt another way; send it as {spelt}",
                param=":path",
                code="invalid_path",
            )
        if kind is None or self._headers.get(":method", "POST").upper() != "POST":
            self._phase = Phase.PASS
            return [self._passed()]
        if self._mode not in SUPPORTED_MODES:
            name = _MODES.BodySendMode.Name(self._mode)
            raise UnsupportedBodyModeError(
                f"the gateway's ext_proc filter sends request bodies in mode {name}; "
                "Gearbox routes with BUFFERED or FULL_DUPLEX_STREAMED"
            )
        self._phase = Phase.BODY
        self.request.route = _ROUTES[kind]
        if headers.end_of_stream:  # no body at all: parsing says so, as a 400
            return self._finish()
        return [messages.continue_headers()] if self._mode == BUFFERED else []

    def _passed(self) -> ProcessingResponse:
        """Headers of a request Gearbox does not route: the client's copies of the headers
        Gearbox sets removed, so no route or picker reads a pair or an SLO it made up."""
        forged = [name for name in self._router.managed if name in self._headers]
        return messages.passed_headers(forged) if forged else messages.continue_headers()

    def _on_body(self, body: Any) -> Answer:
        if self._phase is not Phase.BODY:
            return [self._pass_request_body(body)]
        self._size += len(body.body)
        if self._size > self._max_body_bytes:
            raise PayloadTooLarge(f"the request body is larger than {self._max_body_bytes} bytes")
        self._chunks.append(body.body)
        if body.end_of_stream or self._mode == BUFFERED:
            return self._finish()
        return []

    def _finish(self) -> Answer:
        """Route the collected body (once), or the `Waiting` of a request every pair is
        full for; nothing to do in any other phase."""
        if self._phase is not Phase.BODY:
            return []
        body = b"".join(self._chunks)
        if self._router.counts(body):  # its prompt counted off the loop first
            return Waiting(partial(self._after_count, body))
        try:
            routed = self._route(body, None)
        except Full as full:
            return Waiting(partial(self._after_wait, full))
        return self._routed(routed)

    def _route(self, body: bytes, counted: PromptCount | None) -> Routed:
        request = self.request
        try:
            kind = _KINDS[request.route]  # its body's kind, from its path
            return self._router.route(request, kind, self._headers, body, counted)
        except Full:
            raise
        except BaseException:  # decided, then failed: it no longer counts (else: nothing)
            self._end.free(request)
            raise

    async def _after_count(self, body: bytes) -> list[ProcessingResponse]:
        """The request routed with its prompt counted (`GatewayRouter.count`), after a wait
        in the queue when every pair is full; errors answered as `on_message` answers them."""
        try:
            routed = self._route(body, await self._router.count(body))
        except Full as full:
            return await self._after_wait(full)
        except RouterError as err:
            return self._answer(err)
        except Exception:  # a bug must not leave Envoy waiting on the stream
            logger.exception("ext_proc exchange failed")
            return self._answer(Internal())
        return self._routed(routed)

    async def _after_wait(self, full: Full) -> list[ProcessingResponse]:
        try:
            routed = await self._routed_after(full)
        except RouterError as err:  # its 429, or no route left on the health now
            return self._answer(err)
        except Exception:  # a bug must not leave Envoy waiting on the stream
            logger.exception("ext_proc exchange failed")
            return self._answer(Internal())
        return self._routed(routed)

    async def _routed_after(self, full: Full) -> Routed:
        """The request routed once it leaves the queue (see `GatewayRouter.wait`)."""
        request = self.request
        try:
            return await self._router.wait(request, full, self._arrived)
        except BaseException:  # decided, then failed: it no longer counts (else: nothing)
            self._end.free(request)
            raise

    def _routed(self, routed: Routed) -> list[ProcessingResponse]:
        self._phase, self.answered = Phase.DONE, RequestOutcome.OK
        headers = [*routed.headers, ("content-length", str(len(routed.body)))]
        remove = routed.remove
        if self._mode == BUFFERED:
            return [messages.routed_buffered_body(headers, routed.body, remove)]
        return [
            messages.routed_headers(headers, remove),
            messages.routed_streamed_body(routed.body),
        ]

    def _answer(self, err: RouterError) -> list[ProcessingResponse]:
        self._phase, self.answered = Phase.DONE, err
        return [messages.immediate_error(err)]

    def _pass_request_body(self, body: Any) -> ProcessingResponse:
        if self._mode == FULL_DUPLEX_STREAMED:
            return messages.echo_chunk(body.body, body.end_of_stream)
        return messages.continue_body()

    def _pass_response_body(self, body: Any) -> ProcessingResponse:
        if self._response_mode == FULL_DUPLEX_STREAMED:
            return messages.echo_chunk(body.body, body.end_of_stream, request=False)
        return messages.continue_body(request=False)
