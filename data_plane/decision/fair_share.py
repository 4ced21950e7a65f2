"""Per-tenant fair shares of a contended fleet (docs/data_plane.md, "Flow control").

PURE. The tenants *active* at a request's fleet are those with requests in flight at its
pairs on this replica, and those this replica refused or queued there within `ACTIVE_S` (a
tenant whose requests were refused or wait is still asking; counting only tenants in flight
let a bulk tenant's closed loops keep a light tenant out for good). Each active tenant's
share is the fleet's capacity (this replica's part of the summed class lines,
`saturation.Fleet`) / the active tenants, and a tenant at its share is refused while another
is active and the fleet holds no slot past the others' reserves. Work-conserving between
active and idle tenants: a tenant alone gets the whole fleet, and one that stops asking stops
taking a share ACTIVE_S after its last refusal. Between active tenants, each keeps the whole
slots of its share it does not hold free (its reserve: floor(share) - held, at least 0), so
its next request never waits for them (without a queue a slot must be free for it to go in;
in the HTTP door the queue hands a freed slot over, `flow.queue`); a tenant past its share
may take any slot beyond those reserves. A fractional share reserves nothing: with more
active tenants than the fleet holds requests (12 names on 7 slots), every share is under one
and the fleet fills to its capacity instead of serving one request at a time.
A tenant within its share is never refused by this rule, nor any tenant while a pair of the
fleet has an idle endpoint; the class line (`admission`) is judged first and refuses only a
full fleet, and a tenant within its share may fill past that line by what the other tenants
hold past theirs (`lent_past_shares`, up to the sustainable concurrency).

Tenant counts and refusals are this replica's own; the fleet's load also holds the other
replicas' shared counts and the engines' queues, so a replica divides only its part of the
fleet (`Fleet.part`). The error this leaves: a tenant whose traffic reaches the replicas
unevenly is judged on each replica against that replica's part alone; counts lag by a
sharing interval.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from data_plane.decision.saturation import Fleet, Seen

ACTIVE_S = 2.0  # a tenant refused within this many seconds still counts as active


@dataclass(frozen=True, slots=True)
class OverShare:
    """The tenant holds `held` of the fleet's in-flight work here, its share is `share`."""

    pairs: int
    held: int
    share: float
    retry_after_s: float


def active_at(fleet: Fleet, tenant: str, seen: Seen) -> tuple[int, dict[str, int]]:
    """`tenant`'s requests in flight at the fleet here, and the other active tenants' (0 for
    one refused within ACTIVE_S with nothing in flight)."""
    held = 0
    others: dict[str, int] = {}
    tenants = seen.tenants or {}
    refused = seen.refused or {}
    for p in fleet.pairs:
        for name, n in tenants.get(p.pair, {}).items():
            if name == tenant:
                held += n
            else:
                others[name] = others.get(name, 0) + n
        for name, at in refused.get(p.pair, {}).items():
            if name != tenant and seen.now - at <= ACTIVE_S:
                others.setdefault(name, 0)
    return held, others


def over_fair_share(
    fleet: Fleet, tenant: str, seen: Seen, latency_now_s: float
) -> OverShare | None:
    """None unless another tenant is active at the fleet and `tenant` already holds its fair
    share of it.
    `latency_now_s`: the first pair's predicted seconds at its load now (for Retry-After)."""
    if any(p.least == 0.0 for p in fleet.pairs):
        return None  # an idle endpoint that meets the request: taking it deprives nobody
    held, others = active_at(fleet, tenant, seen)
    if not others:
        return None  # no other tenant to protect: a lone tenant is never limited here
    share = fleet.capacity / (len(others) + 1)
    if held + 1 <= share or _room_past_reserves(fleet, held, others, share):
        return None
    # Its requests finish at held / W a second (W: the cheapest pair's predicted latency at
    # its load now); it is back under its share once held - share + 1 of them have.
    wait_s = (held - share + 1) * latency_now_s / max(held, 1)
    return OverShare(len(fleet.pairs), held, share, wait_s)


def _room_past_reserves(fleet: Fleet, held: int, others: dict[str, int], share: float) -> bool:
    """Whether one more request fits in the fleet here with every other active tenant's
    reserve (the whole slots of its share it does not hold) still free."""
    whole = math.floor(share)
    reserve = sum(max(0, whole - n) for n in others.values())
    return held + sum(others.values()) + 1 <= fleet.capacity - reserve


def lent_past_shares(fleet: Fleet, tenant: str, seen: Seen) -> float:
    """The requests the other active tenants hold at the fleet here past their fair shares,
    when `tenant` is within its own (its next request included); else 0. A tenant within
    its share may fill a pair past its class's line by this many, up to the pair's
    sustainable concurrency (`saturation.Fleet.lent`): a share shrinks when the capacity
    does (a margin that grew, a queued request judged on what is left of its budget) or
    when a tenant becomes active, but requests already dispatched stay; without this, the
    tenant over its share kept the class's line full and the one within it waited for the
    excess to drain (issue 32: a light tenant's misses beside a bulk tenant)."""
    held, others = active_at(fleet, tenant, seen)
    if not others:
        return 0.0
    share = fleet.capacity / (len(others) + 1)
    if held + 1 > share:
        return 0.0
    return sum(max(0.0, n - share) for n in others.values())


def surely_within(held: int, active: int, pair_capacity: float, part_floor: float) -> bool:
    """True when `over_fair_share` cannot refuse, told from figures a decision has at hand:
    `held`, the tenant's requests in flight at every pair here (at least those at the fleet);
    `active`, the tenants active anywhere here, this one included (at least those at the
    fleet); `pair_capacity`, the class line times the live endpoints of one pair of the fleet
    (at most the fleet's summed lines); `part_floor`, at most this replica's part of the
    fleet. Then held + 1 within that share means within the fleet's, and the fleet is not
    computed."""
    return held + 1.0 <= min(1.0, part_floor) * pair_capacity / max(1, active)
