"""Per-tenant fair shares of an overloaded fleet (docs/data_plane.md, "Tenants, priorities
and admission").

PURE. While a request's fleet is overloaded (`capacity.fleet_of`: its recent arrivals exceed
what the pairs that could serve it sustain within its budget), each tenant with requests in
flight at those pairs may hold at most an equal share of their summed sustainable
concurrency: capacity / the tenants active there (this request's tenant included). Tenants
with nothing in flight take no share, so an idle tenant's share goes to the busy ones
(work-conserving); without overload, or with one tenant alone in the fleet, nobody is
limited. The fleet, not the one pair chosen, is what is shared: a tenant bursting on every
pair is limited on all of them, while the tenant it crowds out of the cheapest pair still
has its share on the next. A request past its tenant's share is shed like any other (a
sheddable class only); there is no queue, so "others wait" means the over-share tenant's
client retries after Retry-After while the others' requests go in.

Tenant counts are this replica's own; the fleet's load also holds the other replicas' shared
in-flight counts and the engines' queues. The capacity a replica divides is therefore its
part of the fleet's (`Fleet.part`: its own in flight / the load). The error this leaves: a
tenant whose traffic reaches the replicas unevenly is judged on each replica against that
replica's part alone (sticky load balancing concentrates it, and it is then limited sooner or
later than a single router would); and counts lag by a sharing interval.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from data_plane.decision.capacity import Fleet


@dataclass(frozen=True, slots=True)
class OverShare:
    """The tenant holds `held` of the fleet's in-flight work here, its share is `share`."""

    pairs: int
    held: int
    share: float
    retry_after_s: float


def over_fair_share(
    fleet: Fleet, tenant: str, tenants: Mapping[str, Mapping[str, int]]
) -> OverShare | None:
    """None unless the fleet is overloaded and `tenant` already holds its fair share of it
    (`tenants`: this replica's requests in flight per pair and tenant)."""
    if not fleet.overloaded:
        return None
    held = 0
    active: set[str] = {tenant}
    for p in fleet.pairs:
        at = tenants.get(p.pair, {})
        held += at.get(tenant, 0)
        active.update(at)
    if len(active) < 2:
        return None  # no other tenant to protect: a lone tenant is never limited here
    share = fleet.capacity / len(active)
    if held + 1 <= share:
        return None
    # Its requests finish at held / W a second (W: the cheapest pair's predicted latency at
    # its load now); it is back under its share once held - share + 1 of them have.
    wait_s = (held - share + 1) * fleet.latency_now_s / max(held, 1)
    return OverShare(len(fleet.pairs), held, share, wait_s)
