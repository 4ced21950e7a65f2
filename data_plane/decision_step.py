"""The decision step both front doors call: one request read (body, budget headers, category),
`choose_route` on a health view, shadow mode or the canary applied, and the decision counted.

The step writes what it decided onto the door's request itself (`Decidable`, which each door's
`serving.lifecycle.Request` is), so nothing else carries the request's decision.
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
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from data_plane.asked import Asked as _Asked
from data_plane.asked import Full
from data_plane.asked import Who as _Who
from data_plane.decision.admission import Shed as ShedVerdict
from data_plane.decision.admission import admit
from data_plane.decision.capacity import predicted_at
from data_plane.decision.choose import choose_route
from data_plane.decision.explain import explain_request
from data_plane.decision.fair_share import lent_past_shares, over_fair_share, surely_within
from data_plane.decision.feasibility import effective_limits
from data_plane.decision.headroom import Headroom
from data_plane.decision.no_route import no_route_error
from data_plane.decision.relaxed import idle_relaxed
from data_plane.decision.rollout import apply_rollout, shadow_without_route
from data_plane.decision.saturation import Fleet, Seen, assemble, fleet_of, latency_now_s, room_at
from data_plane.domain import (
    CompiledTable,
    HealthView,
    NoRoute,
    RouteDecision,
    RouteReason,
    RouteRequest,
)
from data_plane.errors import AllUpstreamsUnavailable, RouterError, Shed
from data_plane.request.body import BodyKind
from data_plane.request.identity import PRIORITY_APPLIED, TENANT_APPLIED, Rights, identify
from data_plane.request.inbound import InboundRequest, read_request
from data_plane.request.prompt_tokens import PromptCount
from data_plane.request.tenant import ANONYMOUS
from data_plane.resilience.band_arrivals import BandArrivals
from data_plane.resilience.endpoint_load import LoadTracker, Slot
from data_plane.resilience.output_length import OutputLengths
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


class Behind(Protocol):
    """The door's queue as a decision sees it (`flow.queue.FlowQueue`)."""

    def top_band(self, pairs: frozenset[str] | None = None) -> float | None: ...


class HealthSource(Protocol):
    """What a door knows about the engines when it decides (`resilience.health.Health` in the
    HTTP data plane; gateway mode sees only scraped queues, `gateway.router.ScrapedEngines`)."""

    def view(self) -> HealthView: ...

    def set_ladder(self, state: frozenset[tuple[str, str]]) -> None: ...

    def retry_after_s(self) -> float: ...


# What the decision step writes onto a request; reading one before it did is a bug.
_DECIDED = (
    "table",
    "inbound",
    "decision",
    "tenant",
    "priority",
    "client",
    "held",
    "slot",
    "waited_s",
    "queued_s",
)


class Decidable:
    """One request as the decision step fills it in (`decide`, or the queue's `again`,
    `anyway`, `relaxed`): the door's `serving.lifecycle.Request` is one, so every step after
    the decision reads `request.decision`, `request.table` ... off the request itself. It is
    defined here, below serving and the queue (the "Data plane layers" contract), so the step
    writes onto the request without importing its door; nothing else is a request container.
    The step writes nothing before the last point it may raise, so a request refused or still
    waiting is never part-decided. Reading a field before the decision raises RuntimeError
    (`_guarded`: each field is a property over a slot of its own)."""

    __slots__ = ("is_decided", *(f"_{name}" for name in _DECIDED))

    table: CompiledTable  # the table it was decided on (read once, kept for every retry)
    inbound: InboundRequest  # the request as read
    decision: RouteDecision  # the decision to serve (the pure step's result, after rollout)
    tenant: str  # its metric label (`telemetry.tenants`)
    priority: str  # its priority class
    client: str | None  # its tenant itself when named (None: anonymous), for evidence
    held: str | None  # the pair its tenant's fair share counts it at (`finished` ends it)
    slot: Slot | None  # its place in flight until its first attempt (or its end)
    waited_s: float  # seconds it waited in the queue first (its budget was what was left)
    queued_s: float  # seconds it waited in the queue, however it was then decided

    def __init__(self) -> None:
        self.is_decided = False  # the step filled it in, and holds what `finished` frees


def _guarded(name: str) -> property:
    """`Decidable.<name>`: its slot `_<name>`, whose read before the decision step wrote it
    raises RuntimeError naming the request and the field. A property on these ten fields,
    not `__getattr__`: a class with `__getattr__` pays on every attribute read of every
    instance (3.11 on the 2-core machine: a slot read 15-20 ns, 85 ns with `__getattr__`;
    a property read about 130 ns, on these fields only)."""
    slot = vars(Decidable)[f"_{name}"]
    get = slot.__get__

    def read(request: Decidable) -> Any:
        try:
            return get(request, Decidable)
        except AttributeError:
            who = getattr(request, "id", None)
            raise RuntimeError(f"request {who!r} is not decided yet (read {name!r})") from None

    return property(read, slot.__set__, doc=f"the decision step's `{name}` of the request")


for _name in _DECIDED:
    setattr(Decidable, _name, _guarded(_name))


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
    # This process's requests in flight and refusals per pair and tenant, for fair shares
    # (both doors keep them; None: no fair shares).
    tenant_load: TenantLoad | None = None
    overshoot: Overshoot | None = None  # per pair, the margin its answers ask for
    # The in-flight counts a decided request joins at once (`endpoint_load.Slot`; gateway
    # mode keeps it until the answer ends; None: not counted).
    slots: LoadTracker | None = None
    outputs: OutputLengths | None = None  # how long answers run, per tenant (`output_length`)
    # Requests decided per pair and band lately: the higher bands' demand a class's line
    # keeps room for (`resilience.band_arrivals`; None: static lines)
    arrivals: BandArrivals | None = None


class DecisionStep:
    def __init__(self, parts: StepParts) -> None:
        self._p = parts
        self._headroom = Headroom()  # admission's fast path (`decision.headroom`)

    def current(self) -> CompiledTable | None:
        """The served table; None before the first."""
        return self._p.store.current

    def table(self) -> CompiledTable:
        """The served table, read once per request; 503 with Retry-After before the first."""
        table = self._p.store.current
        if table is None:
            raise AllUpstreamsUnavailable(
                "no routing table is loaded yet", retry_after_s=NO_TABLE_RETRY_AFTER_S
            )
        return table

    def decide(
        self,
        request: Decidable,
        raw: bytes,
        kind: BodyKind,
        headers: Mapping[str, str],
        may_wait: bool = False,
        behind: Behind | None = None,
        counted: PromptCount | None = None,
    ) -> None:
        """Read and decide one request, counted, filling `request` in; raises RouterError for
        an answer the client gets at once (a bad body or header, an unknown model, no route
        outside shadow mode), and `Full` instead of a refusal by load when the door may queue
        it (`may_wait`; then also for a full fleet's request of a class never refused, which
        waits in the top band). `behind`: the door's queue (strict bands: a request of a
        lower band waits behind one of a higher band that waits for one of its pairs,
        `_yield`); `counted`: its prompt's tokens by the alias's tokenizer, where
        `prompt_counter` counted them."""
        table = self.table()
        inbound = read_request(raw, kind, headers, table, counted)
        admission = self._p.admission
        me = identify(headers, table.policy, admission.rights)
        who, priority = me.tenant, (me.priority, me.klass)
        tenant = admission.labels.label(who)
        self._p.metrics.tenant(tenant, priority[0])[0].inc()
        who_ = _Who(who, tenant, *priority)
        self._decided(request, (table, inbound, who_), may_wait, None, behind)

    def again(self, request: Decidable, full: Full, waited_s: float) -> None:
        """Decide a queued request (`request`, as `full`) again after `waited_s` in the queue,
        on the health now: a pair that proves what is left of its budget (`Full.left_after`)
        first, else as on arrival if that pair alone would answer within what is left; raises
        `Full` while it still would be refused or no such pair has room (the queue refuses it
        at its deadline; `request` is then as it was); the table is the one it was read on.
        `full`: as it arrived."""
        asked = full.asked
        inbound = full.inbound.within(full.left_after(waited_s))
        try:
            self._decided(request, (asked.table, inbound, asked.who), True, (full, waited_s))
            return
        except Full:
            pass
        # No pair proves what is left at the load now. The load curve is our estimate, and
        # the queue's deadline rests on the idle service time: decided as on arrival, on its
        # whole budget, it goes if its pair would answer alone within what is left (at the
        # tenant's learned output length), and waits on otherwise.
        # One sent where its pair is predicted, at the load it joins, past what is left is
        # counted (`gearbox_flow_sent_past_budget_total`). Issue 32 tried waiting on instead:
        # in the 3x burst such a request had lost its budget within ~40 ms of waiting, waited
        # to its deadline and went in later, attainment unchanged (docs/benchmarks.md, 9).
        self._decided(request, (asked.table, full.inbound, asked.who), True, (full, waited_s))
        left_s = full.left_after(waited_s).latency_s
        if left_s is None:
            return
        first = request.decision.candidates[0]
        if self._predicted_s(full, request.decision, 1.0) > left_s:
            self.undo(request)
            raise full
        if self._predicted_s(full, request.decision, first.load) > left_s:
            self._p.metrics.flow.past_budget.labels(full.priority).inc()

    def _predicted_s(self, full: Full, decision: RouteDecision, load: float) -> float:
        """`decision`'s first pair's predicted seconds at `load` (this request included; 1:
        nothing else in flight), at the tenant's learned output length where one is shorter
        (`resilience.output_length`)."""
        req = full.asked.req
        limits = effective_limits(full.asked.table, req)
        pair = decision.candidates[0].pair
        if self._p.outputs is not None:
            learned = self._p.outputs.of(full.asked.who.tenant).get((pair.family, limits.category))
            if learned is not None and learned < limits.output_tokens:
                limits = limits._replace(output_tokens=learned)
        return predicted_at(pair, limits, req.facts.input_chars, load)

    def anyway(self, request: Decidable, full: Full, waited_s: float) -> None:
        """A queued request of a class that is never refused (critical by default) whose
        wait ended at its deadline or a bound after `waited_s`: decided on its whole budget
        without admission, as it would be without a queue; counted where its pair is
        predicted, at the load it joins, past what is left of its budget
        (`gearbox_flow_sent_past_budget_total`)."""
        asked = full.asked
        self._decided(request, (asked.table, full.inbound, asked.who), False, (full, 0.0))
        request.queued_s = waited_s
        left_s = full.left_after(waited_s).latency_s
        first = request.decision.candidates[0]
        if left_s is not None and self._predicted_s(full, request.decision, first.load) > left_s:
            self._p.metrics.flow.past_budget.labels(full.priority).inc()

    def relaxed(
        self, request: Decidable, full: Full, wanted: frozenset[str], waited_s: float
    ) -> bool:
        """Best effort instead of the 429 for a queued request whose fleet stayed full, or
        that stayed behind a higher band, until its deadline: decided on its whole budget,
        without admission, on the endpoints with nothing in flight now of pairs no waiting
        request may go to (`wanted`), when one of those pairs proves its floor
        (`relaxed.idle_relaxed`); False (`request` not decided): refuse it (strict mode, a
        tenant past its fair share, no such idle pair that proves the floor). `waited_s`: its
        wait in the queue (`queued_s`)."""
        if not full.relaxable:
            return False
        asked = full.asked
        health = self._p.health.view()
        relaxed = idle_relaxed(asked.table, asked.req, health, self._p.rng, wanted)
        if relaxed is None:
            return False
        read = (asked.table, full.inbound, asked.who)
        self._decided(request, read, False, (full, 0.0), relaxed)
        request.queued_s = waited_s
        return True

    def refuse(self, full: Full, retry_after_s: float, why: str) -> Shed:
        """The 429 for a queued request refused after all, counted as shed."""
        self._p.metrics.tenant(full.asked.who.label, full.priority)[1].inc()
        shed = Shed(f"{full.shed.message}; {why}", retry_after_s=retry_after_s)
        shed.applied = _applied(full.asked.who)
        return shed

    def _decided(
        self,
        request: Decidable,
        read: tuple[CompiledTable, InboundRequest, _Who],
        may_wait: bool,
        queued: tuple[Full, float] | None = None,
        given: RouteDecision | Behind | None = None,
    ) -> None:
        """One request read (`read`: the table, the request as read, who sent it), decided
        (see `decide`) and its tenant's share taken, written onto `request` (after the last
        point it may raise); `queued`: a queued request decided anew (see `again`) and the
        seconds it waited; `given`: the door's queue (see `decide`), or the decision already
        taken (`relaxed`)."""
        table, inbound, who = read
        again = None if queued is None else queued[0]
        behind = None if isinstance(given, RouteDecision) else given
        decided = given if isinstance(given, RouteDecision) else None
        try:
            wait = (may_wait, again, behind)
            decision = self._decision(table, inbound, who, wait, decided)
        except RouterError as err:  # a 429 or no route says what class it was judged as
            err.applied = _applied(who)
            raise
        who_id = who.tenant
        doubt = inbound.facts.doubt
        if doubt is not None:
            self._p.metrics.count_abstention(doubt.routed_as)
        held = None
        if self._p.tenant_load is not None:
            held = decision.candidates[0].pair.pair
            self._p.tenant_load.start(held, who_id)
        if self._p.arrivals is not None:
            self._p.arrivals.arrived(decision.candidates[0].pair.pair, who.klass.share)
        request.table, request.inbound, request.decision = table, inbound, decision
        request.tenant, request.priority = who.label, who.priority
        request.client = None if who_id == ANONYMOUS else who_id
        request.held, request.slot = held, self._slot(decision)
        request.waited_s = request.queued_s = 0.0 if queued is None else queued[1]
        request.is_decided = True

    def _slot(self, decision: RouteDecision) -> Slot | None:
        """The request counted in flight at the endpoint its first attempt goes to (the first
        of its first candidate's, ordered by load), from now until that attempt starts."""
        slots, endpoints = self._p.slots, decision.candidates[0].endpoints
        if slots is None or not endpoints:
            return None
        return Slot(slots, endpoints[0].id)

    def finished(self, request: Decidable) -> None:
        """The request is over (answered, failed or cancelled): its tenant's share is free,
        and so is its slot if no attempt took its place."""
        slot, held = request.slot, request.held
        if slot is not None:
            slot.free()
        if held is not None and self._p.tenant_load is not None:
            self._p.tenant_load.end(held, request.client or ANONYMOUS)

    def undo(self, request: Decidable) -> None:
        """A decision taken back before its request went anywhere (its queue's wait ended in
        the same turn, or `again` found its pair too slow): what it held is free, and the
        request is undecided again (its door frees nothing more, `lifecycle.Finish.free`)."""
        self.finished(request)
        request.is_decided = False

    def explain(
        self, raw: bytes, headers: Mapping[str, str], counted: PromptCount | None = None
    ) -> dict[str, Any]:
        """`POST /v1/route`: the decision for this body and these headers (rollout applied),
        explained; timed like any decision, counted nowhere else. `counted`: as `decide`'s."""
        table = self.table()
        inbound = read_request(raw, "either", headers, table, counted)
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
        wait: tuple[bool, Full | None, Behind | None] = (False, None, None),
        given: RouteDecision | None = None,
    ) -> RouteDecision:
        """The decision to serve (after shadow/canary), counted; raises for no route, except in
        shadow mode, where the default pair serves what the router would refuse, and `Shed`
        when admission sheds it (never in shadow mode: traffic flows as without the router).
        `wait` = (whether the door may queue it, the `Full` it waits as when it is queued
        already and `inbound` carries what is left of its budget, the band it waits behind)."""
        p = self._p
        may_wait, again, behind = wait
        req = RouteRequest(inbound.facts, inbound.budget)
        health = p.health.view()
        result = self._route(table, req, health) if given is None else given
        if p.demand is not None and again is None:  # counted when it first arrived
            p.demand.observe(table, req, health, result)
        asked = _Asked(table, req, health, who, may_wait)
        seen = None if given is not None else self._seen(table, result, who, may_wait)
        # A queued request judged on what is left of its budget has a shape of its own at
        # every wake-up: admission's bound for it would be computed each time, never reused.
        remainder = again is not None and inbound is not again.inbound
        fleet = None if seen is None else self._fleet(asked, result, seen, not remainder)
        if seen is not None:
            result = self._admitted((asked, inbound), result, (fleet, seen), behind)
        if again is not None and may_wait and not _meets(result):
            raise again  # no pair proves what is left of its budget now: it waits on
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
            if seen is not None and who.klass.sheddable:
                self._fair_share((asked, inbound), decision, fleet, seen)
        self._count(table, decision, result)
        return decision

    def _admitted(
        self,
        read: tuple[_Asked, InboundRequest],
        result: RouteDecision | NoRoute,
        judged: tuple[Fleet | None, Seen],
        behind: Behind | None,
    ) -> RouteDecision | NoRoute:
        """`result` as admission lets it through (`decision.admission`), or raises the
        refusal (`Full` where the door may queue it, `_shed`)."""
        asked, inbound = read
        table, req, health, who, may_wait = asked
        fleet, seen = judged
        if may_wait and behind is not None:
            top = behind.top_band()
            if top is not None and -who.klass.share > top:
                self._yield(asked, (inbound, behind), fleet, seen)
        if fleet is None:
            return result
        # A class never refused (critical) is judged like any while it may wait: it waits in
        # the queue's top band, and is never refused there (`flow.queue`).
        klass = who.klass
        if not klass.sheddable:
            klass = klass.model_copy(update={"sheddable": True})
        fleet = self._lent(fleet, who, seen)
        verdict = admit(table, req, health, result, (who.priority, klass), fleet)
        if not isinstance(verdict, ShedVerdict):
            return verdict
        if not may_wait:  # no wait: best effort serves late on an idle pair, if one proves it
            relaxed = idle_relaxed(table, req, health, self._p.rng)
            if relaxed is not None:
                return relaxed
        shed = (verdict.retry_after_s, verdict.detail)
        raise self._shed(asked, (inbound, fleet), *shed, relaxable=True)

    def _lent(self, fleet: Fleet, who: _Who, seen: Seen) -> Fleet:
        """`fleet` with what other tenants hold past their shares lent to `who`'s tenant
        while it is within its own (`fair_share.lent_past_shares`): looked at only when the
        fleet is full at the class's line and another tenant is active."""
        load = self._p.tenant_load
        if load is None or not fleet.full or load.alone(who.tenant):
            return fleet
        lent = lent_past_shares(fleet, who.tenant, seen)
        return replace(fleet, lent=lent) if lent > 0 else fleet

    def _yield(
        self,
        asked: _Asked,
        read: tuple[InboundRequest, Behind],
        fleet: Fleet | None,
        seen: Seen,
    ) -> None:
        """Strict bands: a request of a class below one whose requests wait in the door's
        queue for one of its fleet's pairs waits behind them (`Full`), room or not; a slot
        that frees goes to the higher band first (`flow.queue`)."""
        inbound, behind = read
        table, req, health, who, _ = asked
        if fleet is None:
            fleet = fleet_of(table, req, health, seen, who.klass.share)
        if fleet is None:
            return
        top = behind.top_band(frozenset(p.pair for p in fleet.pairs))
        if top is not None and -who.klass.share > top:
            wait_s = fleet.pairs[0].candidate.predicted_latency_s
            detail = "requests of a higher priority class wait for room"
            # Relaxable: at its deadline it may still be served late on an idle pair that no
            # waiting request wants (`decision.relaxed`), which takes nothing from the band
            # it yields to.
            raise self._shed(asked, (inbound, fleet), wait_s, detail, relaxable=True)

    def _fleet(
        self, asked: _Asked, result: RouteDecision | NoRoute, seen: Seen, bounded: bool = True
    ) -> Fleet | None:
        """The request's fleet (`decision.saturation`), or None when the pair chosen has room
        for it (the fast path, `headroom.Headroom.room_for`: one sustainable figure, and a
        bound kept per request shape, compared with in-flight counts) or no pair meets the
        request unloaded; `bounded`: whether that bound may be kept for this request)."""
        table, req, health, who, _ = asked
        share = who.klass.share
        if isinstance(result, RouteDecision) and result.reason in _FEASIBLE:
            first = result.candidates[0]
            if self._headroom.room_for(first, (table, req, health), (seen, share), bounded):
                return None
        return fleet_of(table, req, health, seen, share)

    def _seen(
        self, table: CompiledTable, result: RouteDecision | NoRoute, who: _Who, may_wait: bool
    ) -> Seen | None:
        """What admission reads when the request may be refused or queued (a sheddable
        class, or any class at a door that may queue it; shedding on, outside shadow mode),
        else None."""
        p = self._p
        if not (who.klass.sheddable or may_wait):
            return None
        if not p.admission.shed or table.policy.shadow.enabled:
            return None
        if isinstance(result, RouteDecision) and result.reason is RouteReason.SHADOW:
            return None
        margins = None if p.overshoot is None else p.overshoot.raw()
        outputs = None if p.outputs is None else p.outputs.of(who.tenant)
        above = None if p.arrivals is None else p.arrivals.above(who.klass.share)
        load = p.tenant_load
        if load is None:
            return Seen(None, 0.0, margins, None, outputs, above)
        return Seen(load.by_pair(), load.now(), margins, load.refusals(), outputs, above)

    def _fair_share(
        self,
        read: tuple[_Asked, InboundRequest],
        decision: RouteDecision,
        fleet: Fleet | None,
        seen: Seen,
    ) -> None:
        """Refuse a sheddable request whose tenant holds its fair share of the fleet while
        another tenant is active (`decision.fair_share`; a canary's baseline is judged on its
        own pair alone)."""
        asked, inbound = read
        table, req, health, who, _ = asked
        load = self._p.tenant_load
        if load is None or load.alone(who.tenant):
            return  # the common case: no other tenant to share with, no fleet computed
        serving = decision.candidates[0]
        if fleet is None and self._surely_within(asked, decision, load, seen):
            return  # within its share of the pair it takes alone: no fleet computed
        adaptive = decision.adaptive
        if adaptive is not None and adaptive.candidates[0].pair is not serving.pair:
            limits = effective_limits(table, req)
            fleet = assemble((serving,), (req, limits), health, seen, who.klass.share)
        elif fleet is None:
            fleet = fleet_of(table, req, health, seen, who.klass.share)
        if fleet is None:
            return
        now_s = latency_now_s(fleet.pairs[0], req.facts.input_chars)
        over = over_fair_share(fleet, who.tenant, seen, now_s)
        if over is not None:
            detail = (
                f"the {over.pairs} pairs that meet this request are contended and tenant "
                f"{who.label!r} holds {over.held} of their requests, its fair share being "
                f"{over.share:.1f}"
            )
            raise self._shed(asked, (inbound, fleet), over.retry_after_s, detail)

    def _surely_within(
        self, asked: _Asked, decision: RouteDecision, load: TenantLoad, seen: Seen
    ) -> bool:
        """`fair_share.surely_within` for the pair a feasible decision serves on (one of the
        fleet's): its class line, and this replica's part of it against all the load it
        sees, a floor of its part of the fleet."""
        table, req, health, who, _ = asked
        if decision.reason not in _FEASIBLE or decision.adaptive is not None:
            return False
        serving = decision.candidates[0]
        margin = seen.margin_s(serving.pair.pair)
        limits = seen.limits_for(effective_limits(table, req), serving.pair.family)
        above = seen.above_rps(serving.pair.pair)
        room = room_at(serving, limits, req, health, (who.klass.share, margin), above)
        mine = sum((seen.tenants or {}).get(serving.pair.pair, {}).values())
        floor = (mine + 1.0) / (sum(health.load.values()) + 1.0)
        capacity = room.line * len(serving.endpoints)
        return surely_within(load.held(who.tenant), load.active(who.tenant), capacity, floor)

    def _shed(
        self,
        asked: _Asked,
        read: tuple[InboundRequest, Fleet],
        retry_after_s: float,
        detail: str,
        relaxable: bool = False,
    ) -> Shed | Full:
        """The refusal to raise: `Full` when the door may queue the request, else the 429
        (`errors.Shed`), counted. Either way its tenant stays active at the fleet a while."""
        inbound, fleet = read
        who = asked.who
        if self._p.tenant_load is not None:
            self._p.tenant_load.refused(fleet.pairs[0].pair, who.tenant)
        shed = Shed(detail, retry_after_s=retry_after_s)
        if asked.may_wait:
            pairs = frozenset(p.pair for p in fleet.pairs)
            service_s = fleet.pairs[0].candidate.predicted_latency_s
            return Full(asked, inbound, shed, service_s, pairs, relaxable)
        self._p.metrics.tenant(who.label, who.priority)[1].inc()
        return shed

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


def _meets(result: RouteDecision | NoRoute) -> bool:
    """Whether `result` serves on a pair that proves the request's floor and budget (not a
    best-effort relaxation, not no route)."""
    return isinstance(result, RouteDecision) and result.reason in _FEASIBLE


def _applied(who: _Who) -> tuple[tuple[str, str], ...]:
    """The response headers naming the class and tenant label a request was judged as."""
    return ((PRIORITY_APPLIED, who.priority), (TENANT_APPLIED, who.label))
