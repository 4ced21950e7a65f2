"""The HTTP door's queue inside the budget (docs/data_plane.md, "Flow control").

A request admission would refuse because every pair that meets it is full (or its tenant
holds its share, `decision.fair_share`) waits here instead, and is decided again when a pair
may have room: when one of this replica's requests finishes (`finished`), and at the queue's
next predicted drain time (the earliest Retry-After the waiting requests were given, between
`MIN_RECHECK_S` and `MAX_RECHECK_S`: other replicas' requests and the engines' queues, which
this replica only learns of by sharing and scrape, drain without telling it). Re-deciding
picks the cheapest pair that then has room and still proves its floor and what is left of
its budget (`choose_route` runs again on the health then, `DecisionStep.again`); while no
pair proves the remainder it waits on. Order: strict priority bands (a larger class share
first), then the band's tenants in turn (round robin: the tenant dispatched last goes to the
back), then the tenant's earliest deadline first.

It is refused (429, `Retry-After`, `x-should-retry`) only when its *deadline* passes (its
latency budget less the predicted service time on the cheapest pair of its fleet, idle: a
later start cannot make the budget even unloaded; `FLOW_MAX_WAIT_S` for a request without
latency budget) or a bound is hit (`FLOW_QUEUE_MAX` waiting in all, `FLOW_QUEUE_PER_TENANT`
of one tenant). A class that is never refused (critical; `Full.sheddable` False) waits in
its band like any, and at its deadline or a bound goes in anyway (`DecisionStep.anyway`: its
whole budget, no admission, as without a queue). At its deadline a best-effort request whose
fleet stayed full is served late instead, where a pair that proves its floor and that no
waiting request may go to has an endpoint with nothing in flight (`DecisionStep.relaxed`; not
a tenant past its fair share, and not at a bound). The service time is predicted at the output
length its tenant's answers run to (`resilience.output_length`), at most its `max_tokens` (or
the category's default).
Retry-After after a refusal is the observed drain: the requests waiting ahead over the rate
at which this replica's requests finished lately (the predicted drain when none has).

A client that disconnects cancels its handler (`handler_cancellation`), and its request
leaves the queue at once. A wake-up decides again at most `TRIES_PER_WAKE` waiting requests
(the heads of the tenants in order), so a long queue of requests that still find no room
costs the event loop a bounded time per finished request. At most one request is dispatched
per wake-up; the next wake-up is scheduled right after. A dispatched request counts as in
flight at the endpoint its decision chose from the decision on (`endpoint_load.Slot`, taken
by the decision step), not from when its handler runs again: so no later decision, a
wake-up's or an arrival's, sees the slot it took as free.
Event-loop thread only.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Protocol

from data_plane.asked import Full
from data_plane.decision_step import Decidable
from data_plane.errors import RouterError, Shed
from data_plane.settings import FlowSettings
from data_plane.telemetry.flow_metrics import FlowMetrics, Refusal

MIN_RECHECK_S = 0.01
MAX_RECHECK_S = 1.0
TRIES_PER_WAKE = 8  # waiting requests decided again per wake-up, at most
_DRAIN_SAMPLES = 64  # finishes the observed drain rate is taken over


class Redecide(Protocol):
    """What the queue needs of the decision step (`DecisionStep`)."""

    def again(self, request: Decidable, full: Full, waited_s: float) -> None: ...

    def refuse(self, full: Full, retry_after_s: float, why: str) -> Shed: ...

    def anyway(self, request: Decidable, full: Full, waited_s: float) -> None: ...

    def relaxed(
        self, request: Decidable, full: Full, wanted: frozenset[str], waited_s: float
    ) -> bool: ...

    def undo(self, request: Decidable) -> None: ...


@dataclass(eq=False)
class _Waiter:
    request: Decidable  # what the decision step fills in when it is dispatched
    full: Full
    deadline: float  # loop time by which it must be dispatched
    since: float
    arrived: float  # loop time it arrived at: its budget runs from then
    future: asyncio.Future[None]  # done: dispatched (`request` decided), or its error
    gone: bool = False


@dataclass
class _Band:
    """One priority band: per tenant a heap of waiters by deadline, and the tenants' turn."""

    tenants: dict[str, list[tuple[float, int, _Waiter]]] = field(default_factory=dict)
    turn: deque[str] = field(default_factory=deque)

    def head(self, tenant: str) -> _Waiter | None:
        heap = self.tenants.get(tenant, [])
        while heap and heap[0][2].gone:
            heapq.heappop(heap)
        return heap[0][2] if heap else None

    def served(self, tenant: str) -> None:
        """`tenant`'s head went: it goes to the back of the turn (or out, when none waits)."""
        heapq.heappop(self.tenants[tenant])
        self.turn.remove(tenant)
        if self.head(tenant) is None:
            del self.tenants[tenant]
        else:
            self.turn.append(tenant)


class FlowQueue:
    """This replica's waiting requests (see the module docstring)."""

    def __init__(
        self,
        step: Redecide,
        metrics: FlowMetrics,
        limits: FlowSettings,
        max_hold_s: float | None = None,
    ) -> None:
        """`limits`: the queue's bounds, settings group `flow` (its `queue` switch is the
        caller's: `wiring.flow_settings` gives none when it is off); `max_hold_s`: every wait,
        at most (gateway mode's `EXTPROC_MAX_HOLD_S`; the HTTP door has none)."""
        self._step = step
        self._metrics = metrics
        self._limits = limits
        self._max_hold_s = max_hold_s
        self._bands: dict[float, _Band] = {}
        self._waiting = 0
        self._per_tenant: dict[str, int] = {}
        self._seq = itertools.count()
        self._finishes: deque[float] = deque(maxlen=_DRAIN_SAMPLES)
        self._pairs: dict[float, Counter[str]] = {}  # per band, its waiters' fleet pairs
        self._recheck: asyncio.TimerHandle | None = None
        self._soon = False

    def __len__(self) -> int:
        return self._waiting

    def waits_for(self, pair: str) -> bool:
        """Whether a request waits here for `pair` (one of the pairs of its fleet)."""
        return any(pair in held for held in self._pairs.values())

    @property
    def max_hold_s(self) -> float | None:
        """Every wait, at most (None: the budget and `max_wait_s` alone bound it)."""
        return self._max_hold_s

    def top_band(self, pairs: frozenset[str] | None = None) -> float | None:
        """The highest band with requests waiting (for one of `pairs`, when given; None:
        none wait); an arrival of a lower band waits behind them (`DecisionStep.decide`'s
        `behind`)."""
        if not self._waiting:
            return None
        if pairs is None:
            return min(self._bands)
        bands = [b for b, held in self._pairs.items() if not held.keys().isdisjoint(pairs)]
        return min(bands, default=None)

    async def wait(self, request: Decidable, full: Full, arrived: float) -> None:
        """`request` (as `full`) decided once a pair has room (or raises its 429). `arrived`:
        the loop time it arrived at (its budget runs from then)."""
        loop = asyncio.get_running_loop()
        refusal = self._bound(full)
        if refusal is not None:
            self._refuse_or_send(request, full, refusal, None)
            return
        budget = full.budget_s
        wait_s = self._limits.max_wait_s if budget is None else budget - full.service_s
        if self._max_hold_s is not None:
            wait_s = min(wait_s, self._max_hold_s)
        deadline = arrived + wait_s
        if deadline <= loop.time():
            self._refuse_or_send(request, full, Refusal.DEADLINE, None)
            return
        waiter = _Waiter(request, full, deadline, loop.time(), arrived, loop.create_future())
        self._push(waiter)
        self._metrics.entered.labels(full.asked.who.label, full.priority).inc()
        self._schedule(loop, full.shed.retry_after_s)
        try:
            async with asyncio.timeout_at(deadline):
                await waiter.future
                return
        except TimeoutError:
            future = waiter.future
            dispatched = future.done() and not future.cancelled()
            if dispatched and not full.sheddable:  # in the very turn its wait ended
                future.result()  # raises the error it was dispatched with, if any
                return
            self._release(waiter)
            waited_s = loop.time() - waiter.since
            self._refuse_or_send(request, full, Refusal.DEADLINE, waited_s)
        except asyncio.CancelledError:  # the client went away
            self._release(waiter)
            raise
        finally:
            self._drop(waiter)

    def finished(self) -> None:
        """One of this replica's requests finished: a slot may be free."""
        loop = asyncio.get_running_loop()
        self._finishes.append(loop.time())
        if self._waiting:
            self.kick()

    def kick(self) -> None:
        """Dispatch the first waiting request, in order, that now gets a decision: each
        tenant's head in turn, at most TRIES_PER_WAKE of them (each is a whole decision, a
        few hundred microseconds; the rest wait for the next wake-up). Strict bands: while a
        band's heads find no room, no lower band's request is tried."""
        self._soon = False
        now = asyncio.get_running_loop().time()
        tries = 0
        blocked: set[str] = set()  # pairs a higher band's heads found no room on
        for band in sorted(self._bands):
            b = self._bands[band]
            stuck: set[str] = set()
            for tenant in list(b.turn):
                waiter = b.head(tenant)
                if waiter is None or not blocked.isdisjoint(waiter.full.pairs):
                    continue
                if waiter.future.done():  # its wait ended this turn (deadline, client gone)
                    self._leave(waiter)  # before its task resumed to leave: not dispatched
                    continue
                if tries == TRIES_PER_WAKE:
                    return
                tries += 1
                try:
                    self._step.again(waiter.request, waiter.full, now - waiter.arrived)
                except Full as still:  # its refusal now; the request as it arrived stays
                    waiter.full.shed = still.shed
                    waiter.full.relaxable = still.relaxable
                    stuck |= waiter.full.pairs
                    continue
                except RouterError as err:  # e.g. no route left on the health now
                    self._leave(waiter)
                    waiter.future.set_exception(err)
                    return
                b.served(tenant)
                self._leave(waiter)
                loop = asyncio.get_running_loop()
                self._metrics.left(waiter.full.priority, loop.time() - waiter.since, None)
                waiter.future.set_result(None)
                if self._waiting and not self._soon:
                    self._soon = True
                    loop.call_soon(self.kick)
                return
            blocked |= stuck

    def _release(self, waiter: _Waiter) -> None:
        """A request dispatched in the very turn its wait ended otherwise: its decision
        holds a tenant's share, which nobody else would free; it is undecided again."""
        future = waiter.future
        if future.done() and not future.cancelled() and future.exception() is None:
            self._step.undo(waiter.request)

    def _bound(self, full: Full) -> Refusal | None:
        if self._waiting >= self._limits.queue_max:
            return Refusal.QUEUE_FULL
        if self._per_tenant.get(full.tenant, 0) >= self._limits.queue_per_tenant:
            return Refusal.TENANT_LIMIT
        return None

    def _push(self, waiter: _Waiter) -> None:
        full = waiter.full
        band = self._bands.setdefault(full.band, _Band())
        heap = band.tenants.setdefault(full.tenant, [])
        if not heap:
            band.turn.append(full.tenant)
        heapq.heappush(heap, (waiter.deadline, next(self._seq), waiter))
        self._waiting += 1
        self._per_tenant[full.tenant] = self._per_tenant.get(full.tenant, 0) + 1
        self._pairs.setdefault(full.band, Counter()).update(full.pairs)
        self._metrics.waiting(full.priority, 1)

    def _leave(self, waiter: _Waiter) -> None:
        """`waiter` is out of the counts (dispatched, refused or gone); its heap entry goes
        when it reaches its tenant's head."""
        if waiter.gone:
            return
        waiter.gone = True
        tenant = waiter.full.tenant
        self._waiting -= 1
        left = self._per_tenant[tenant] - 1
        if left:
            self._per_tenant[tenant] = left
        else:
            del self._per_tenant[tenant]
        held = self._pairs[waiter.full.band]
        held.subtract(waiter.full.pairs)
        for pair in waiter.full.pairs:
            if held[pair] <= 0:
                del held[pair]
        if not held:
            del self._pairs[waiter.full.band]
        self._metrics.waiting(waiter.full.priority, -1)

    def _drop(self, waiter: _Waiter) -> None:
        """After the wait, whatever ended it: a cancelled or timed-out waiter leaves, and a
        band or tenant with nobody waiting goes."""
        self._leave(waiter)
        key, tenant = waiter.full.band, waiter.full.tenant
        band = self._bands.get(key)
        if band is None:
            return
        if tenant in band.tenants and band.head(tenant) is None:
            del band.tenants[tenant]
            band.turn.remove(tenant)
        if not band.tenants:
            del self._bands[key]

    def _refuse_or_send(
        self, request: Decidable, full: Full, refusal: Refusal, waited_s: float | None
    ) -> None:
        """The 429 for a sheddable request, unless at its deadline best effort serves it late
        on an idle pair that proves its floor (`DecisionStep.relaxed`); a class never refused
        (critical) goes in instead, decided without admission (`DecisionStep.anyway`). Either
        is counted as dispatched when it waited (`waited_s` None: it never entered the
        queue)."""
        if full.sheddable:
            relaxed = False
            if refusal is Refusal.DEADLINE:  # not onto a pair a waiting request may go to
                wanted = frozenset(p for held in self._pairs.values() for p in held)
                relaxed = self._step.relaxed(request, full, wanted, waited_s or 0.0)
            if not relaxed:
                raise self._refuse(full, refusal, waited_s or 0.0)
        else:
            self._step.anyway(request, full, waited_s or 0.0)
        if waited_s is not None:
            self._metrics.left(full.priority, waited_s, None)

    def _refuse(self, full: Full, refusal: Refusal, waited_s: float) -> Shed:
        self._metrics.left(full.priority, waited_s, refusal)
        why = {
            Refusal.DEADLINE: "its budget no longer allows a wait for room",
            Refusal.QUEUE_FULL: f"{self._waiting} requests wait here already",
            Refusal.TENANT_LIMIT: "its tenant has as many requests waiting as it may",
        }[refusal]
        return self._step.refuse(full, self._retry_after_s(full), why)

    def _retry_after_s(self, full: Full) -> float:
        """The observed drain: requests waiting over the rate requests finished lately;
        the predicted drain when too few have finished to tell."""
        if len(self._finishes) < 2:
            return full.shed.retry_after_s
        span = self._finishes[-1] - self._finishes[0]
        if span <= 0:
            return full.shed.retry_after_s
        rate = (len(self._finishes) - 1) / span
        return max(full.shed.retry_after_s, (self._waiting + 1) / rate)

    def _schedule(self, loop: asyncio.AbstractEventLoop, drain_s: float) -> None:
        """A wake-up at the predicted drain time (the earliest one asked for)."""
        at = loop.time() + min(MAX_RECHECK_S, max(MIN_RECHECK_S, drain_s))
        if self._recheck is not None and self._recheck.when() <= at:
            return
        if self._recheck is not None:
            self._recheck.cancel()
        self._recheck = loop.call_at(at, self._rechecked, loop, drain_s)

    def _rechecked(self, loop: asyncio.AbstractEventLoop, drain_s: float) -> None:
        self._recheck = None
        if self._waiting:
            self.kick()
            self._schedule(loop, drain_s)
