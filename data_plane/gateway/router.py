"""One request in gateway mode: body and headers -> the pair, the rewritten body and the
headers Envoy sets before it re-selects the route (or a RouterError for the client).

The decision is the HTTP data plane's own step (`decision_step.py`: parse, budget, classify,
`choose_route`, shadow or canary, counted), after a wait in the HTTP door's queue when every
pair is full (`gateway.in_flight`), without the attempt loop: retries, breakers and endpoint
choice belong to the gateway and its endpoint picker (docs/gateway.md, "What it does not do").
"""

from __future__ import annotations

import posixpath
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from urllib.parse import unquote

from data_plane.asked import Full
from data_plane.decision_step import (
    NO_TABLE_RETRY_AFTER_S,
    Admission,
    DecisionStep,
    StepParts,
    default_admission,
)
from data_plane.domain import HealthView, per_request
from data_plane.flow.queue import FlowQueue
from data_plane.gateway.in_flight import GatewayDoor
from data_plane.gateway.slo import SLO_HEADERS, slo_headers
from data_plane.prompt_counter import PromptCounter
from data_plane.request.body import BodyKind
from data_plane.request.identity import Rights
from data_plane.request.prompt_tokens import PromptCount
from data_plane.resilience.band_arrivals import BandArrivals, kept_for
from data_plane.resilience.endpoint_load import LoadTracker
from data_plane.resilience.tenant_load import TenantLoad
from data_plane.serving.lifecycle import Request
from data_plane.serving.route_headers import route_reason
from data_plane.settings import FlowSettings
from data_plane.table_store import TableStore
from data_plane.telemetry.metrics import DataPlaneMetrics

ROUTED_PATHS: Mapping[str, BodyKind] = {
    "/v1/chat/completions": "chat",
    "/v1/completions": "completions",
}
REASON_HEADER = "x-gearbox-route-reason"
VERSION_HEADER = "x-gearbox-table-version"


def routed_kind(path: str) -> BodyKind | None:
    """The body kind of a path Gearbox routes (query string ignored), else None."""
    return ROUTED_PATHS.get(path.split("?", 1)[0])


def respelt_routed_path(path: str) -> str | None:
    """The routed path that `path` spells another way (percent-encoded, doubled slashes, dot
    segments), which an engine's server decodes to that path; None for the path itself (a
    trailing slash too: the engine redirects it to the path) and for every other path."""
    literal = path.split("?", 1)[0]
    decoded = posixpath.normpath(unquote(literal))
    decoded = "/" + decoded.lstrip("/")  # normpath keeps a leading "//"
    if decoded in ROUTED_PATHS and literal.rstrip("/") != decoded:
        return decoded
    return None


@per_request
class Routed:
    pair: str
    body: bytes  # the client's body with only `model` rewritten to the served name
    headers: tuple[tuple[str, str], ...]  # set on the request before the route is re-picked
    # Headers Gearbox sets that this answer does not: the client's copies are removed, so
    # the endpoint picker never reads a value the client made up (an SLO, a pair).
    remove: tuple[str, ...] = ()


class ScrapedEngines:
    """What gateway mode knows about the engines: their queues as scraped from their
    `/metrics` (`sync/engine_scrape.py`, every `SCRAPE_INTERVAL_S`) and the requests it
    routed that have not ended (`gateway.in_flight`), and nothing else: it sees no answers'
    status, so no endpoint is ever ejected. The precision ladder's state is kept from one
    decision to the next, as the data plane's `Health` keeps it."""

    __slots__ = ("_view",)

    def __init__(self, tracker: LoadTracker) -> None:
        self._view = HealthView(load=tracker.load)

    def view(self) -> HealthView:
        return self._view

    def set_ladder(self, state: frozenset[tuple[str, str]]) -> None:
        if state is not self._view.ladder:
            self._view = HealthView(load=self._view.load, ladder=state)

    def retry_after_s(self) -> float:
        return NO_TABLE_RETRY_AFTER_S


@dataclass(frozen=True, slots=True)
class GatewayRouter:
    """Decides for one request at a time through the shared decision step (`door`: with the
    queue and the in-flight counts of `gateway.in_flight`)."""

    door: GatewayDoor
    pair_header: str
    # large prompts' tokens by the alias's tokenizer, as the HTTP door counts them
    counter: PromptCounter | None = None

    @property
    def managed(self) -> tuple[str, ...]:
        """The headers Gearbox sets (lower case): a client's copies never reach the routes or
        the endpoint picker, on any path (docs/gateway.md)."""
        return (self.pair_header.lower(), REASON_HEADER, VERSION_HEADER, *SLO_HEADERS)

    def counts(self, body: bytes) -> bool:
        """Whether `body`'s prompt is counted by its alias's tokenizer before `route`
        (`PromptCounter.counts`: a large body, a table naming the tokenizer)."""
        counter = self.counter
        return counter is not None and counter.counts(body, self.door.step.current())

    async def count(self, body: bytes) -> PromptCount | None:
        """`body`'s prompt tokens by its alias's tokenizer, off the loop, or None
        (`PromptCounter.count`): what `route` takes as `counted`."""
        counter = self.counter
        return None if counter is None else await counter.count(body, self.door.step.current())

    def route(
        self,
        request: Request,
        kind: BodyKind,
        headers: Mapping[str, str],
        body: bytes,
        counted: PromptCount | None = None,
    ) -> Routed:
        """Raises a RouterError (InvalidRequest, InvalidBudget, ModelNotFound,
        BudgetInfeasible, AllUpstreamsUnavailable, Shed) for an answer the client gets at
        once, or `Full` when the request may wait in the queue (`wait`). Once decided,
        `request` counts until its door frees it (`lifecycle.Finish.free`), also when this
        raises after the decision. `counted`: the prompt's tokens (`count`), where counted."""
        self.door.decide(request, kind, headers, body, counted)
        return self._rewritten(request)

    async def wait(self, request: Request, full: Full, arrived: float) -> Routed:
        """`route` for a request every pair was full for, once a pair has room (raises its
        429 at its deadline or a bound); `arrived`: the loop time its headers came at."""
        await self.door.wait(request, full, arrived)
        return self._rewritten(request)

    def _rewritten(self, request: Request) -> Routed:
        decision, doubt = request.decision, request.inbound.facts.doubt
        first = decision.candidates[0]
        pair = first.pair
        out = [
            (self.pair_header, pair.pair),
            (REASON_HEADER, route_reason(decision.reason, first, doubt)),
            (VERSION_HEADER, str(request.table.version)),
            *slo_headers(decision, first),
        ]
        set_here = {name for name, _ in out}
        remove = tuple(name for name in self.managed if name not in set_here)
        body = request.inbound.body_for(pair.served_model_name)
        return Routed(pair.pair, body, tuple(out), remove)


def gateway_router(
    store: TableStore,
    metrics: DataPlaneMetrics,
    rng: random.Random,
    pair_header: str,
    admission: Admission | None = None,
    tracker: LoadTracker | None = None,
    limits: FlowSettings | None = None,
    max_hold_s: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    arrivals: BandArrivals | None = None,
    counter: PromptCounter | None = None,
) -> GatewayRouter:
    """Gateway mode's router: the decision step on the engines' scraped load and its own
    requests in flight (`tracker`, which the scrape fills; without one, only its own), and
    the queue within `limits` and `max_hold_s` (limits None: a request every pair is full for
    is refused at once); its requests in flight and refusals per pair and tenant, on `clock`,
    for fair shares (`resilience.tenant_load`, as the HTTP door keeps them).
    By default llm-d's objective header is the gateway's (`request.identity`), as
    `wiring.admission(gateway=True)` says. `arrivals`: the requests decided per pair and
    band, for the lines' reserves (`resilience.band_arrivals.kept_for` on `store` and
    `clock` when None)."""
    if admission is None:
        admission = replace(default_admission(), rights=Rights(objective_trusted=True))
    tracker = tracker or LoadTracker()
    parts = StepParts(
        store,
        ScrapedEngines(tracker),
        metrics,
        rng,
        admission=admission,
        tenant_load=TenantLoad(clock),
        slots=tracker,
        arrivals=arrivals or kept_for(store, clock),
    )
    step = DecisionStep(parts)
    queue = None if limits is None else FlowQueue(step, metrics.flow, limits, max_hold_s)
    return GatewayRouter(GatewayDoor(step, queue), pair_header, counter)
