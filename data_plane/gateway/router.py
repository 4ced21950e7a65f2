"""One request in gateway mode: body and headers -> the pair, the rewritten body and the
headers Envoy sets before it re-selects the route (or a RouterError for the client).

The same steps as the HTTP data plane's decision (parse, budget, classify, `choose_route`,
rollout), without the attempt loop: retries, breakers and endpoint choice belong to the
gateway and its endpoint picker (docs/gateway.md, "What it does not do").
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from data_plane.decision.choose import choose_route
from data_plane.decision.no_route import no_route_error
from data_plane.decision.rollout import apply_rollout
from data_plane.domain import HealthView, NoRoute, RouteRequest, per_request
from data_plane.errors import AllUpstreamsUnavailable
from data_plane.gateway.slo import slo_headers
from data_plane.request.inbound import read_request
from data_plane.table_store import TableStore
from data_plane.telemetry.metrics import DataPlaneMetrics

Kind = Literal["chat", "completions"]
ROUTED_PATHS: Mapping[str, Kind] = {
    "/v1/chat/completions": "chat",
    "/v1/completions": "completions",
}
REASON_HEADER = "x-gearbox-route-reason"
VERSION_HEADER = "x-gearbox-table-version"
NO_TABLE_RETRY_AFTER_S = 1.0


def routed_kind(path: str) -> Kind | None:
    """The body kind of a path Gearbox routes (query string ignored), else None."""
    return ROUTED_PATHS.get(path.split("?", 1)[0])


@per_request
class Routed:
    pair: str
    body: bytes  # the client's body with only `model` rewritten to the served name
    headers: tuple[tuple[str, str], ...]  # set on the request before the route is re-picked


@dataclass(frozen=True, slots=True)
class GatewayRouter:
    """Decides for one request at a time; `health` gives the view each decision reads."""

    store: TableStore
    metrics: DataPlaneMetrics
    rng: random.Random
    pair_header: str
    health: Callable[[], HealthView] = HealthView

    def route(self, kind: Kind, headers: Mapping[str, str], body: bytes) -> Routed:
        """Raises a RouterError (InvalidRequest, InvalidBudget, ModelNotFound,
        BudgetInfeasible, AllUpstreamsUnavailable) for an answer the client gets at once."""
        table = self.store.current
        if table is None:
            raise AllUpstreamsUnavailable(
                "no routing table is loaded yet", retry_after_s=NO_TABLE_RETRY_AFTER_S
            )
        inbound = read_request(body, kind, headers, table)
        facts, budget = inbound.facts, inbound.budget
        if facts.doubt is not None:
            self.metrics.count_abstention(facts.doubt.routed_as)
        started = time.perf_counter()
        result = choose_route(table, RouteRequest(facts, budget), self.health(), self.rng)
        self.metrics.decision_duration.observe(time.perf_counter() - started)
        if isinstance(result, NoRoute):
            self.metrics.no_route.labels(result.reason).inc()
            raise no_route_error(result, NO_TABLE_RETRY_AFTER_S)
        decision = apply_rollout(result, table, self.rng.random())
        first = decision.candidates[0]
        pair = first.pair
        self.metrics.count_decision(pair.pair, decision.reason, result.category, facts.complexity)
        self.metrics.pair(pair.pair).predicted.observe(first.predicted_latency_s)
        reason_suffix = "" if facts.doubt is None else facts.doubt.reason_suffix
        out = [
            (self.pair_header, pair.pair),
            (REASON_HEADER, decision.reason.value + reason_suffix),
            (VERSION_HEADER, str(table.version)),
            *slo_headers(decision, first),
        ]
        return Routed(pair.pair, inbound.body_for(pair.served_model_name), tuple(out))
