"""The decision step both front doors call: one request read (body, budget headers, category),
`choose_route` on a health view, shadow mode or the canary applied, and the decision counted.

The HTTP data plane (`serving/handlers.py`) then walks the decision's fallback chain through
the proxy; gateway mode (`gateway/router.py`) hands the chosen pair to Envoy. What a decision
is and how it is counted is therefore the same behind both doors; only what each door knows
about the engines differs (its `HealthSource`).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from contracts.policy import PriorityClass
from data_plane.decision.admission import Shed as ShedVerdict
from data_plane.decision.admission import admit
from data_plane.decision.capacity import Fleet, Seen, calm, fleet_of, pair_fleet
from data_plane.decision.choose import choose_route
from data_plane.decision.explain import explain_request
from data_plane.decision.fair_share import over_fair_share
from data_plane.decision.no_route import no_route_error
from data_plane.decision.rollout import apply_rollout, shadow_without_route
from data_plane.domain import (
    CompiledTable,
    HealthView,
    NoRoute,
    RouteDecision,
    RouteReason,
    RouteRequest,
    per_request,
)
from data_plane.errors import AllUpstreamsUnavailable, RouterError, Shed
from data_plane.request.body import BodyKind
from data_plane.request.identity import PRIORITY_APPLIED, TENANT_APPLIED, Rights, identify
from data_plane.request.inbound import InboundRequest, read_request
from data_plane.request.tenant import ANONYMOUS
from data_plane.resilience.arrivals import Arrivals
from data_plane.resilience.overshoot import Overshoot
from data_plane.resilience.tenant_load import TenantLoad
from data_plane.table_store import TableStore
from data_plane.telemetry.demand import SpilledDemand
from data_plane.telemetry.feedback import FeedbackAggregator
from data_plane.telemetry.metrics import DataPlaneMetrics
from data_plane.telemetry.tenants import TenantLabels
from data_plane.telemetry.tracing import ATTR_PAIR, ATTR_REASON, ATTR_TABLE_VERSION, Tracing

logger = logging.getLogger(__name__)

NO_TABLE_RETRY_AFTER_S = 1.0
_FEASIBLE = frozenset({RouteReason.CHEAPEST_FEASIBLE, RouteReason.MOST_PRECISE_FEASIBLE})


class HealthSource(Protocol):
    """What a door knows about the engines when it decides (`resilience.health.Health` in the
    HTTP data plane; gateway mode sees only scraped queues, `gateway.router.ScrapedEngines`)."""

    def view(self) -> HealthView: ...

    def set_ladder(self, state: frozenset[tuple[str, str]]) -> None: ...

    def retry_after_s(self) -> float: ...


@per_request
class Decided:
    """One request decided: the table it was decided on (read once, kept for every retry),
    the request as read, and the decision to serve."""

    table: CompiledTable
    inbound: InboundRequest
    decision: RouteDecision
    tenant: str = "anonymous"  # its metric label (`telemetry.tenants`)
    priority: str = "standard"  # its priority class
    client: str | None = None  # its tenant itself when named (None: anonymous), for evidence
    held: str | None = None  # the pair its tenant's fair share counts it at (`finished` ends it)


class _Who(NamedTuple):
    """A request's tenant (itself, for fair shares; its metric label) and priority class."""

    tenant: str
    label: str
    priority: str
    klass: PriorityClass


class _Asked(NamedTuple):
    """One request as admission judges it: the table, the request, the health it was
    decided on, and who sent it."""

    table: CompiledTable
    req: RouteRequest
    health: HealthView
    who: _Who


@dataclass(frozen=True, slots=True)
class Admission:
    """Who a request is and whether load may shed it (settings group `admission`)."""

    labels: TenantLabels
    rights: Rights = field(default_factory=Rights)  # who may claim which tenant and class
    shed: bool = True  # ADMISSION_SHED


def default_admission() -> Admission:
    return Admission(TenantLabels(20))


@dataclass(frozen=True, slots=True)
class StepParts:
    store: TableStore
    health: HealthSource
    metrics: DataPlaneMetrics
    rng: random.Random
    tracing: Tracing | None = None  # the request span's attributes, when one is recorded
    demand: SpilledDemand | None = None  # the autoscaling signal's spilled requests
    feedback: FeedbackAggregator | None = None  # the recent traffic mix (contracts.evidence)
    admission: Admission = field(default_factory=default_admission)
    # This process's requests in flight per pair and tenant, for fair shares, and the work
    # it sent per pair, for overload (None, as in gateway mode, which sends no request and
    # does not see requests end: no fair shares, and overload is the load alone).
    tenant_load: TenantLoad | None = None
    arrivals: Arrivals | None = None
    overshoot: Overshoot | None = None  # per pair, the margin its answers ask for


class DecisionStep:
    def __init__(self, parts: StepParts) -> None:
        self._p = parts

    def table(self) -> CompiledTable:
        """The served table, read once per request; 503 with Retry-After before the first."""
        table = self._p.store.current
        if table is None:
            raise AllUpstreamsUnavailable(
                "no routing table is loaded yet", retry_after_s=NO_TABLE_RETRY_AFTER_S
            )
        return table

    def decide(self, raw: bytes, kind: BodyKind, headers: Mapping[str, str]) -> Decided:
        """Read and decide one request, counted; raises RouterError for an answer the client
        gets at once (a bad body or header, an unknown model, no route outside shadow mode)."""
        table = self.table()
        inbound = read_request(raw, kind, headers, table)
        admission = self._p.admission
        me = identify(headers, table.policy, admission.rights)
        who, priority = me.tenant, (me.priority, me.klass)
        tenant = admission.labels.label(who)
        self._p.metrics.tenant(tenant, priority[0])[0].inc()
        try:
            decision = self._decision(table, inbound, _Who(who, tenant, *priority))
        except RouterError as err:  # a 429 or no route says what class it was judged as
            err.applied = ((PRIORITY_APPLIED, priority[0]), (TENANT_APPLIED, tenant))
            raise
        doubt = inbound.facts.doubt
        if doubt is not None:
            self._p.metrics.count_abstention(doubt.routed_as)
        client = None if who == ANONYMOUS else who
        held = None
        if self._p.tenant_load is not None:
            held = decision.candidates[0].pair.pair
            self._p.tenant_load.start(held, who)
        return Decided(table, inbound, decision, tenant, priority[0], client, held)

    def finished(self, decided: Decided) -> None:
        """The request is over (answered, failed or cancelled): its tenant's share is free."""
        if decided.held is not None and self._p.tenant_load is not None:
            self._p.tenant_load.end(decided.held, decided.client or ANONYMOUS)

    def explain(self, raw: bytes, headers: Mapping[str, str]) -> dict[str, Any]:
        """`POST /v1/route`: the decision for this body and these headers (rollout applied),
        explained; timed like any decision, counted nowhere else."""
        table = self.table()
        inbound = read_request(raw, "either", headers, table)
        facts = inbound.facts
        result = self._route(table, RouteRequest(facts, inbound.budget), self._p.health.view())
        if isinstance(result, RouteDecision):
            result = apply_rollout(result, table, self._p.rng.random())
        return explain_request(result, table, facts)

    def _route(
        self, table: CompiledTable, req: RouteRequest, health: HealthView
    ) -> RouteDecision | NoRoute:
        # No span of its own: a few us of pure work; its duration is the histogram's, and
        # its outcome the request span's attributes (`_count`).
        p = self._p
        started = time.perf_counter()
        result = choose_route(table, req, health, p.rng)
        p.metrics.decision_duration.observe(time.perf_counter() - started)
        return result

    def _decision(
        self,
        table: CompiledTable,
        inbound: InboundRequest,
        who: _Who,
    ) -> RouteDecision:
        """The decision to serve (after shadow/canary), counted; raises for no route, except in
        shadow mode, where the default pair serves what the router would refuse, and `Shed`
        when admission sheds it (never in shadow mode: traffic flows as without the router)."""
        p = self._p
        req = RouteRequest(inbound.facts, inbound.budget)
        health = p.health.view()
        result = self._route(table, req, health)
        if p.demand is not None:
            p.demand.observe(table, req, health, result)
        asked = _Asked(table, req, health, who)
        seen = self._seen(table, result, who)
        fleet = None if seen is None else self._fleet(asked, result, seen)
        if fleet is not None:
            verdict = admit(table, req, health, result, (who.priority, who.klass), fleet)
            if isinstance(verdict, ShedVerdict):
                self._arrived(result)
                raise self._shed(who, verdict.retry_after_s, verdict.detail)
            result = verdict
        if isinstance(result, NoRoute):
            p.metrics.no_route.labels(result.reason).inc()
            shadow = shadow_without_route(result, table, req)
            if shadow is None:
                raise no_route_error(result, p.health.retry_after_s())
            decision = shadow
        else:
            if result.ladder is not None:  # quality-first: its hysteresis state for the next one
                p.health.set_ladder(result.ladder)
            decision = apply_rollout(result, table, p.rng.random())
            self._arrived(decision)
            if seen is not None:
                self._fair_share(asked, decision, fleet, seen)
        self._count(table, decision, result)
        return decision

    def _fleet(self, asked: _Asked, result: RouteDecision | NoRoute, seen: Seen) -> Fleet | None:
        """The request's fleet (`decision.capacity`), or None when `calm` says it cannot be
        overloaded (or no pair meets the request unloaded)."""
        table, req, health, _ = asked
        if (
            isinstance(result, RouteDecision)
            and result.reason in _FEASIBLE
            and calm(table, req, health, result.candidates[0], seen)
        ):
            return None
        return fleet_of(table, req, health, seen)

    def _arrived(self, result: RouteDecision | NoRoute) -> None:
        """Count the work arriving at the pair that serves `result` (or would have: a shed
        one), its predicted seconds there."""
        if self._p.arrivals is not None and isinstance(result, RouteDecision):
            first = result.candidates[0]
            self._p.arrivals.arrived(first.pair.pair, first.predicted_latency_s)

    def _seen(
        self, table: CompiledTable, result: RouteDecision | NoRoute, who: _Who
    ) -> Seen | None:
        """What admission reads when the request may be shed (a sheddable class, shedding on,
        outside shadow mode), else None."""
        p = self._p
        if not who.klass.sheddable or not p.admission.shed or table.policy.shadow.enabled:
            return None
        if isinstance(result, RouteDecision) and result.reason is RouteReason.SHADOW:
            return None
        tenants = None if p.tenant_load is None else p.tenant_load.by_pair()
        if p.arrivals is None:
            return Seen(tenants, None, 0.0)
        arrivals = p.arrivals
        margins = None if p.overshoot is None else p.overshoot.raw()
        return Seen(tenants, arrivals.raw(), arrivals.now(), arrivals.all_pairs(), margins)

    def _fair_share(
        self, asked: _Asked, decision: RouteDecision, fleet: Fleet | None, seen: Seen
    ) -> None:
        """Shed a sheddable request whose tenant holds its fair share of the overloaded fleet
        (`decision.fair_share`; a canary's baseline is judged on its own pair alone; HTTP data
        plane only: gateway mode does not see requests end)."""
        table, req, health, who = asked
        serving = decision.candidates[0]
        adaptive = decision.adaptive
        if adaptive is not None and adaptive.candidates[0].pair is not serving.pair:
            fleet = pair_fleet(table, req, health, serving, seen)
        if fleet is None or seen.tenants is None:
            return
        over = over_fair_share(fleet, who.tenant, seen.tenants)
        if over is not None:
            detail = (
                f"the {over.pairs} pairs that meet this request are overloaded and tenant "
                f"{who.label!r} holds {over.held} of their requests, its fair share being "
                f"{over.share:.1f}"
            )
            raise self._shed(who, over.retry_after_s, detail)

    def _shed(self, who: _Who, retry_after_s: float, detail: str) -> Shed:
        """Count the shed request; the 429 to raise (`errors.Shed`)."""
        self._p.metrics.tenant(who.label, who.priority)[1].inc()
        return Shed(detail, retry_after_s=retry_after_s)

    def _count(
        self, table: CompiledTable, decision: RouteDecision, result: RouteDecision | NoRoute
    ) -> None:
        p = self._p
        adaptive = decision.adaptive
        if adaptive is not None:
            p.metrics.pair(adaptive.candidates[0].pair.pair).shadow.inc()
        if decision.reason is RouteReason.SHADOW and logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "shadow decision",
                extra={
                    "pair": adaptive.candidates[0].pair.pair if adaptive else None,
                    "reason": adaptive.reason.value if adaptive else result.reason.value,
                },
            )
        first = decision.candidates[0]
        if p.feedback is not None:
            p.feedback.observe_decision(table.version, decision)
        p.metrics.count_decision(
            first.pair.pair, decision.reason, decision.category, decision.complexity
        )
        p.metrics.pair(first.pair.pair).predicted.observe(first.predicted_latency_s)
        span = None if p.tracing is None else p.tracing.current()
        if span is not None:
            span.set_attribute(ATTR_TABLE_VERSION, table.version)
            span.set_attribute(ATTR_REASON, decision.reason.value)
            span.set_attribute(ATTR_PAIR, first.pair.pair)
