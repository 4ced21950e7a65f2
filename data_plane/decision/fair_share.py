"""Per-tenant fair shares of a saturated pair (docs/data_plane.md, "Tenants, priorities and
admission").

PURE. When the pair a request would go to is at its sustainable concurrency (the profile's
highest measured load on each live endpoint, the autoscaling signal's unit), each tenant with
requests in flight there may hold at most an equal share of it: capacity / the tenants active
at the pair (this request's tenant included). Tenants with nothing in flight take no share,
so an idle tenant's share goes to the busy ones (work-conserving); below saturation, or with
one tenant alone at the pair, nobody is limited. A request past its tenant's share is shed
like any other (a sheddable class only); there is no queue, so "others wait" means the
over-share tenant's client retries after Retry-After while the others' requests go in.

Tenant counts are this replica's own; the pair's load also holds the other replicas' shared
in-flight counts and the engines' queues. The capacity a replica divides is therefore its
part of the pair's: capacity x (its own in-flight at the pair / the pair's load). The error
this leaves: a tenant whose traffic reaches the replicas unevenly is judged on each replica
against that replica's part alone (sticky load balancing concentrates it, and it is then
limited sooner or later than a single router would); and counts lag by a sharing interval.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from data_plane.domain import Candidate, HealthView


@dataclass(frozen=True, slots=True)
class OverShare:
    """The tenant holds `held` of the pair's in-flight work here, its share is `share`."""

    pair: str
    held: int
    share: float
    retry_after_s: float


def over_fair_share(
    cand: Candidate, health: HealthView, tenant: str, tenants: Mapping[str, int]
) -> OverShare | None:
    """None unless `cand`'s pair is saturated and `tenant` already holds its fair share of it
    (`tenants`: this replica's requests in flight at the pair, by tenant)."""
    pair = cand.pair
    live = [e for e in pair.endpoints if e.id not in health.open_endpoints]
    capacity = pair.max_profiled_load * len(live)
    load = sum(health.load.get(e.id, 0.0) for e in live)
    if not math.isfinite(capacity) or load + 1.0 <= capacity:
        return None  # spare capacity: no one is limited
    held = tenants.get(tenant, 0)
    active = len(tenants) + (tenant not in tenants)
    if active < 2:
        return None  # no other tenant to protect: a lone tenant is never limited here
    mine = sum(tenants.values())
    share = capacity * min(1.0, mine / load) / active
    if held + 1 <= share:
        return None
    # Its requests finish at held / W a second (W: the pair's predicted latency now); it is
    # back under its share once held - share + 1 of them have.
    wait_s = (held - share + 1) * cand.predicted_latency_s / max(held, 1)
    return OverShare(pair.pair, held, share, wait_s)
