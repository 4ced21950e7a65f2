"""One request as admission judges it (who sent it, what it asks, on what health), and the
verdict a door that may queue it gets instead of a refusal (docs/data_plane.md, "Flow
control"): what `decision_step.DecisionStep` hands to `flow.queue`."""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

from contracts.policy import PriorityClass
from data_plane.decision.feasibility import effective_limits
from data_plane.domain import Budget, CompiledTable, HealthView, RouteRequest
from data_plane.errors import Shed
from data_plane.request.inbound import InboundRequest


class Who(NamedTuple):
    """A request's tenant (itself, for fair shares; its metric label) and priority class."""

    tenant: str
    label: str
    priority: str
    klass: PriorityClass


class Asked(NamedTuple):
    """One request as admission judges it: the table, the request, the health it was
    decided on, who sent it, and whether its door may hold it in a queue."""

    table: CompiledTable
    req: RouteRequest
    health: HealthView
    who: Who
    may_wait: bool = False


class Full(Exception):  # noqa: N818 - a verdict handed to the door, not an error
    """Admission would refuse the request now and its door may queue it instead
    (`flow.queue`): what re-deciding it and refusing it later need. Nothing is counted
    yet; its tenant already counts as active (`TenantLoad.refused`)."""

    def __init__(
        self,
        asked: Asked,
        inbound: InboundRequest,
        shed: Shed,
        service_s: float,
        pairs: frozenset[str] = frozenset(),
        relaxable: bool = False,
    ):
        super().__init__(shed.message)
        self.pairs = pairs  # its fleet's pairs: it waits behind a higher band's on these only
        # Whether best effort may serve it late on an idle pair instead of its 429 at the
        # deadline (`DecisionStep.relaxed`): its fleet is full, or it waits behind a higher
        # band's requests; not its tenant past its share.
        self.relaxable = relaxable
        self.asked = asked
        self.inbound = inbound
        self.shed = shed  # the 429 to answer if it is refused after all
        self.service_s = service_s  # predicted seconds of its answer on the cheapest pair, idle

    @property
    def tenant(self) -> str:
        return self.asked.who.tenant

    @property
    def priority(self) -> str:
        return self.asked.who.priority

    @property
    def sheddable(self) -> bool:
        """False for a class that waits but is never refused (critical by default)."""
        return self.asked.who.klass.sheddable

    @property
    def band(self) -> float:
        """Bands in order: a larger share first (critical, standard, batch by default)."""
        return -self.asked.who.klass.share

    @property
    def budget_s(self) -> float | None:
        return effective_limits(self.asked.table, self.asked.req).latency_s

    def left_after(self, waited_s: float) -> Budget:
        """Its budget less `waited_s` spent waiting (the client's clock runs from its
        arrival): the latency and TTFT budgets (the category's defaults where the client set
        none) shortened, never below 0; floor, cost cap, mode and category as asked."""
        limits = effective_limits(self.asked.table, self.asked.req)
        latency, ttft = limits.latency_s, limits.ttft_s
        return replace(
            self.asked.req.budget,
            latency_s=None if latency is None else max(0.0, latency - waited_s),
            ttft_s=None if ttft is None else max(0.0, ttft - waited_s),
        )
