"""The flow-control queue's metrics (docs/METRICS.md, "Flow control"): how many requests wait
per priority band, how long they waited, and what became of them: dispatched, or refused by
reason. Tenant labels are the bounded ones of `telemetry.tenants`; bands are the policy's
priority classes."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from enum import StrEnum

from data_plane.telemetry.series import C, Exposition, Family

WAIT_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class Refusal(StrEnum):
    """Why a waiting request (or one the queue would not take) was refused."""

    DEADLINE = "deadline"  # its budget less the predicted service time ran out
    QUEUE_FULL = "queue_full"  # the replica's queue holds FLOW_QUEUE_MAX requests
    TENANT_LIMIT = "tenant_limit"  # its tenant has FLOW_QUEUE_PER_TENANT waiting


class FlowMetrics:
    """Queue length and wait per band, requests queued per tenant, dispatches and refusals,
    and the output lengths learned per tenant, family and category."""

    def __init__(self, r: Exposition) -> None:
        self._exposition = r
        self.output_tokens = r.gauge(
            "gearbox_flow_output_tokens",
            "Output tokens flow control predicts a tenant's requests at: the p90 of its recent "
            "answers' usage.completion_tokens (tenant other: the largest of the unlabelled)",
            ["tenant", "family", "category"],
        )
        self.queued = r.gauge(
            "gearbox_flow_queue_length", "Requests waiting in this replica's queue", ["priority"]
        )
        self.wait = r.histogram(
            "gearbox_flow_queue_wait_seconds",
            "Time a request waited in the queue, dispatched or refused",
            ["priority", "outcome"],
            buckets=WAIT_BUCKETS_S,
        )
        self.entered = r.counter(
            "gearbox_flow_queued_total", "Requests that had to wait", ["tenant", "priority"]
        )
        self.dispatched = r.counter(
            "gearbox_flow_dispatched_total", "Waiting requests dispatched", ["priority"]
        )
        self.refused = r.counter(
            "gearbox_flow_refused_total",
            "Requests the queue refused (429), by reason",
            ["priority", "reason"],
        )

        self.past_budget = r.counter(
            "gearbox_flow_sent_past_budget_total",
            "Waiting requests sent to a pair predicted, at the load they join, past what is "
            "left of their budget (dispatched on their whole budget, or, of a class never "
            "refused, at their deadline or a bound)",
            ["priority"],
        )

    def touch(self, tenant: str, priority: str) -> None:
        """Create a tenant label's and a band's series at 0, so they are exported before
        anything waits (as the tenant counters are)."""
        self.entered.labels(tenant, priority)
        self.queued.labels(priority)
        self.dispatched.labels(priority)
        self.past_budget.labels(priority)
        for outcome in ("dispatched", "refused"):
            self.wait.labels(priority, outcome)
        for reason in Refusal:
            self.refused.labels(priority, reason)

    def watch_outputs(
        self,
        figures: Callable[[], Iterable[tuple[str, str, str, int]]],
        label: Callable[[str], str],
    ) -> None:
        """Set `gearbox_flow_output_tokens` at every scrape from `figures` ((tenant, family,
        category, tokens), `OutputLengths.figures`), each tenant under `label` of it (the
        bounded labels, `TenantLabels.peek`): where several tenants share a label, the
        largest figure (the one that admits the fewest requests). A figure no longer learned
        leaves the page."""
        gauge = self.output_tokens

        def refresh() -> None:
            largest: dict[tuple[str, str, str], int] = {}
            for tenant, family, category, tokens in figures():
                key = (label(tenant), family, category)
                largest[key] = max(tokens, largest.get(key, 0))
            gauge.children.clear()
            for key, tokens in largest.items():
                gauge.labels(*key).set(tokens)

        self._exposition.before_collect.append(refresh)

    def waiting(self, priority: str, delta: int) -> None:
        self.queued.labels(priority).inc(delta)

    def left(self, priority: str, waited_s: float, refusal: Refusal | None) -> None:
        """A waiting request left the queue: dispatched (`refusal` None) or refused."""
        outcome = "dispatched" if refusal is None else "refused"
        self.wait.labels(priority, outcome).observe(waited_s)
        if refusal is None:
            self.dispatched.labels(priority).inc()
        else:
            self.refused.labels(priority, refusal).inc()

    def totals(
        self,
    ) -> tuple[dict[tuple[str, str], int], dict[str, int], dict[str, dict[str, int]]]:
        """For the live state the operator page reads: requests that had to wait per (tenant
        label, priority) since start, those waiting now per priority, and the refusals per
        priority and reason since start (reasons never counted left out)."""
        queued = {(k[0], k[1]): int(c.value) for k, c in _once(self.entered)}
        waiting = {k[0]: int(c.value) for k, c in _once(self.queued)}
        refused: dict[str, dict[str, int]] = {}
        for k, c in _once(self.refused):
            if c.value:
                refused.setdefault(k[0], {})[k[1]] = int(c.value)
        return queued, waiting, refused


def _once(family: Family[C]) -> Iterator[tuple[tuple[str, ...], C]]:
    """(exported label values, child) of each child once (a child may sit under two keys)."""
    seen: set[int] = set()
    for key, child in family.children.items():
        if id(child) not in seen:
            seen.add(id(child))
            yield tuple(str(v) for v in key), child
