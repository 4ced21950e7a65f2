"""flow/queue.py: the queue inside the budget. A waiting request is dispatched when a
decision finds room, in order (band, then tenants in turn, then earliest deadline), refused
at its deadline or at a bound, and leaves at once when its client goes away."""

from __future__ import annotations

import asyncio
from typing import cast

import pytest

from contracts.policy import PriorityClass
from data_plane.asked import Asked, Full, Who
from data_plane.decision_step import Decidable
from data_plane.domain import Budget, HealthView
from data_plane.errors import Shed
from data_plane.flow.queue import TRIES_PER_WAKE, FlowQueue
from data_plane.request.inbound import InboundRequest
from data_plane.settings import FlowSettings
from data_plane.telemetry.flow_metrics import FlowMetrics, Refusal
from data_plane.telemetry.series import Exposition
from tests.support.waiting import eventually
from tests.unit.data_plane.admission_fleet import bench_fleet, request

STANDARD = PriorityClass(share=0.75, sheddable=True)
BATCH = PriorityClass(share=0.5, sheddable=True)
CRITICAL = PriorityClass(share=1.0, sheddable=False)
NAMES = {id(STANDARD): "standard", id(BATCH): "batch", id(CRITICAL): "critical"}


def full(
    tenant: str, budget_s: float = 60.0, klass: PriorityClass = STANDARD, relaxable: bool = True
) -> Full:
    """A request every pair was full for (its fleet one pair), predicted at 0.1 s on it
    idle; `relaxable` False: its tenant was past its fair share instead."""
    name = NAMES[id(klass)]
    asked = Asked(bench_fleet(), request(Budget(latency_s=budget_s)), HealthView(),
                  Who(tenant, tenant, name, klass), True)  # fmt: skip
    shed = Shed("full", retry_after_s=0.5)
    pairs = frozenset({"fam@fp16"})
    return Full(asked, cast(InboundRequest, None), shed, 0.1, pairs, relaxable)


class Step:
    """The decision step as the queue sees it: `room` decisions to hand out, then Full."""

    def __init__(self) -> None:
        self.room = 0
        self.order: list[str] = []
        self.refused: list[str] = []
        self.ended: list[str] = []  # decisions taken back (`undo`)
        self.waited: list[float] = []
        self.anyway_sent: list[str] = []
        self.blocked: set[str] = set()  # tenants whose requests find no room whatever
        self.idle = 0  # idle pairs best effort may serve a refused request on instead
        self.relaxed_sent: list[str] = []
        self.wanted: list[frozenset[str]] = []  # the pairs waiting requests may go to, per ask

    def again(self, request: Decidable, f: Full, waited_s: float) -> None:
        self.waited.append(waited_s)
        if self.room <= 0 or f.tenant in self.blocked:
            raise f
        self.room -= 1
        self.order.append(f.tenant)
        request.tenant = f.tenant  # what the test reads of its decision

    def refuse(self, f: Full, retry_after_s: float, why: str) -> Shed:
        self.refused.append(f"{f.tenant}: {why}")
        return Shed(why, retry_after_s=retry_after_s)

    def undo(self, request: Decidable) -> None:
        self.ended.append(request.tenant)

    def anyway(self, request: Decidable, f: Full, waited_s: float) -> None:
        self.anyway_sent.append(f.tenant)
        request.tenant = f"{f.tenant} anyway"

    def relaxed(self, request: Decidable, f: Full, wanted: frozenset[str], waited_s: float) -> bool:
        self.wanted.append(wanted)
        if not f.relaxable or self.idle <= 0:
            return False
        self.idle -= 1
        self.relaxed_sent.append(f.tenant)
        request.tenant = f"{f.tenant} relaxed"
        return True


class Queue:
    def __init__(self, limits: FlowSettings | None = None) -> None:
        self.step = Step()
        self.metrics = FlowMetrics(Exposition())
        self.flow = FlowQueue(self.step, self.metrics, limits or FlowSettings())


async def waited(flow: FlowQueue, f: Full, arrived: float) -> str:
    """`f`'s request once the queue let it go: what the step wrote on it (its tenant)."""
    request = Decidable()
    await flow.wait(request, f, arrived)
    return request.tenant


async def enqueue(q: Queue, *fulls: Full) -> list[asyncio.Task[str]]:
    loop = asyncio.get_running_loop()
    tasks = []
    for f in fulls:
        tasks.append(asyncio.create_task(waited(q.flow, f, loop.time())))
        await asyncio.sleep(0)  # each queued in turn
    await eventually(lambda: len(q.flow) == len(fulls), what="all waiting")
    return tasks


async def drain(q: Queue, n: int) -> list[str]:
    """`n` slots free one at a time, each as a request finishes."""
    for _ in range(n):
        q.step.room += 1
        q.flow.finished()
        await asyncio.sleep(0)
    return q.step.order


async def test_a_waiting_request_is_dispatched_when_a_request_finishes() -> None:
    q = Queue()
    (task,) = await enqueue(q, full("a"))
    q.flow.finished()  # no room yet: it keeps waiting
    await asyncio.sleep(0)
    assert not task.done()
    assert await drain(q, 1) == ["a"]
    assert await task == "a"
    assert len(q.flow) == 0
    assert q.metrics.dispatched.labels("standard").value == 1


async def test_bands_first_then_tenants_in_turn_then_earliest_deadline() -> None:
    q = Queue()
    tasks = await enqueue(
        q,
        full("bulk", 50.0), full("bulk", 40.0), full("bulk", 30.0),
        full("batchy", 1.0, BATCH),
        full("light", 60.0),
    )  # fmt: skip
    order = await drain(q, 5)
    # Standard before batch; bulk and light take turns (bulk queued first); bulk's earliest
    # deadline first; batch last though its deadline is the earliest of all.
    assert order == ["bulk", "light", "bulk", "bulk", "batchy"]
    assert [str(d) for d in await asyncio.gather(*tasks)] == ["bulk"] * 3 + ["batchy", "light"]


async def test_a_light_tenant_goes_ahead_of_a_bulk_backlog() -> None:
    q = Queue()
    tasks = await enqueue(q, *(full("bulk") for _ in range(6)), full("light"))
    assert (await drain(q, 2)) == ["bulk", "light"]
    q.step.room = 10
    q.flow.kick()
    await asyncio.gather(*tasks)


async def test_refused_at_its_deadline_with_the_reason_counted() -> None:
    q = Queue()
    (task,) = await enqueue(q, full("a", budget_s=0.15))  # 0.05 s of wait allowed
    with pytest.raises(Shed):
        await task
    assert q.step.refused == ["a: its budget no longer allows a wait for room"]
    assert len(q.flow) == 0
    assert q.metrics.refused.labels("standard", Refusal.DEADLINE).value == 1


async def test_at_its_deadline_best_effort_serves_it_on_an_idle_pair_instead() -> None:
    """An idle pair that proves its floor serves a request whose fleet stayed full, late,
    rather than a 429; one per idle pair, and never a tenant past its fair share."""
    q = Queue()
    q.step.idle = 1
    past_share = full("b", budget_s=0.15, relaxable=False)
    first, second, third = await enqueue(
        q, full("a", budget_s=0.15), full("a", budget_s=0.15), past_share
    )
    assert await first == "a relaxed"
    for refused in (second, third):
        with pytest.raises(Shed):
            await refused
    assert q.step.relaxed_sent == ["a"]
    assert q.step.wanted[0] == frozenset({"fam@fp16"})  # the waiting requests' fleet: not there
    assert [r.split(":")[0] for r in q.step.refused] == ["a", "b"]
    assert q.metrics.dispatched.labels("standard").value == 1
    assert q.metrics.refused.labels("standard", Refusal.DEADLINE).value == 2


async def test_a_bound_refuses_without_best_effort() -> None:
    q = Queue(FlowSettings(queue_max=1))
    q.step.idle = 5
    (task,) = await enqueue(q, full("a"))
    with pytest.raises(Shed):
        await waited(q.flow, full("b"), asyncio.get_running_loop().time())
    assert q.step.relaxed_sent == []
    task.cancel()


async def test_a_request_whose_budget_is_already_spent_is_refused_at_once() -> None:
    q = Queue()
    loop = asyncio.get_running_loop()
    with pytest.raises(Shed):
        await waited(q.flow, full("a", budget_s=0.15), loop.time() - 1.0)
    assert len(q.flow) == 0


async def test_the_bounds_refuse_past_them() -> None:
    q = Queue(FlowSettings(queue_max=3, queue_per_tenant=2))
    tasks = await enqueue(q, full("a"), full("a"), full("b"))
    loop = asyncio.get_running_loop()
    with pytest.raises(Shed):
        await waited(q.flow, full("c"), loop.time())
    with pytest.raises(Shed):
        await waited(q.flow, full("a"), loop.time())
    assert [r.split(":")[0] for r in q.step.refused] == ["c", "a"]
    assert q.metrics.refused.labels("standard", Refusal.QUEUE_FULL).value == 2
    q2 = Queue(FlowSettings(queue_max=10, queue_per_tenant=1))
    more = await enqueue(q2, full("a"))
    with pytest.raises(Shed):
        await waited(q2.flow, full("a"), loop.time())
    assert q2.metrics.refused.labels("standard", Refusal.TENANT_LIMIT).value == 1
    for t in [*tasks, *more]:
        t.cancel()


async def test_a_client_that_goes_away_leaves_the_queue_at_once() -> None:
    q = Queue()
    gone, stays = await enqueue(q, full("a"), full("b"))
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert len(q.flow) == 1
    assert await drain(q, 1) == ["b"]
    assert await stays == "b"


async def test_a_request_dispatched_as_its_client_goes_away_gives_its_share_back() -> None:
    q = Queue()
    (task,) = await enqueue(q, full("a"))
    q.step.room = 1
    q.flow.kick()  # dispatched: its decision holds a share ...
    task.cancel()  # ... and the client is gone before the handler resumes
    with pytest.raises(asyncio.CancelledError):
        await task
    assert q.step.ended == ["a"]


async def test_a_wake_up_decides_again_a_bounded_number_of_waiting_requests() -> None:
    q = Queue()
    tasks = await enqueue(q, *(full(f"t{i}") for i in range(TRIES_PER_WAKE + 5)))
    tried: list[str] = []
    again = q.step.again

    def counting(request: Decidable, f: Full, waited_s: float) -> None:
        tried.append(f.tenant)
        again(request, f, waited_s)

    q.step.again = counting  # type: ignore[method-assign]
    q.flow.kick()  # no room anywhere: each tenant's head is tried, up to the bound
    assert len(tried) == TRIES_PER_WAKE
    for t in tasks:
        t.cancel()


async def test_a_request_is_decided_again_on_the_time_since_it_arrived() -> None:
    """The budget runs from arrival: `again` gets the seconds since then (the body read and
    the first decision included), for what is left of the budget (`Full.left_after`)."""
    q = Queue()
    loop = asyncio.get_running_loop()
    arrived = full("a")
    task = asyncio.create_task(waited(q.flow, arrived, loop.time() - 0.5))
    await eventually(lambda: len(q.flow) == 1, what="it waits")
    q.flow.kick()  # still no room
    q.step.room = 1
    q.flow.kick()
    assert await task == "a"
    assert len(q.step.waited) == 2
    assert all(w >= 0.5 for w in q.step.waited)
    assert q.step.waited[1] >= q.step.waited[0]


async def test_the_critical_band_goes_first() -> None:
    q = Queue()
    tasks = await enqueue(q, full("std"), full("bat", klass=BATCH), full("crit", klass=CRITICAL))
    assert await drain(q, 3) == ["crit", "std", "bat"]
    await asyncio.gather(*tasks)


async def test_a_critical_request_is_sent_anyway_at_its_deadline_never_refused() -> None:
    q = Queue()
    (task,) = await enqueue(q, full("c", budget_s=0.15, klass=CRITICAL))  # 0.05 s of wait
    assert await task == "c anyway"
    assert q.step.refused == []
    assert len(q.flow) == 0
    assert q.metrics.dispatched.labels("critical").value == 1
    assert q.metrics.refused.labels("critical", Refusal.DEADLINE).value == 0


async def test_a_critical_request_past_a_bound_goes_in_at_once() -> None:
    q = Queue(FlowSettings(queue_max=10, queue_per_tenant=1))
    waiting = await enqueue(q, full("c", klass=CRITICAL))
    loop = asyncio.get_running_loop()
    assert await waited(q.flow, full("c", klass=CRITICAL), loop.time()) == "c anyway"
    assert q.step.refused == []
    assert len(q.flow) == 1
    for t in waiting:
        t.cancel()


async def test_a_lower_band_waits_while_a_higher_bands_heads_find_no_room() -> None:
    """Strict bands: a critical request that finds no room (what is left of its budget is
    too little at the load now) keeps the slot from the standard request behind it; an
    arrival of a lower band is told to wait behind it (`top_band`)."""
    q = Queue()
    assert q.flow.top_band() is None
    q.step.blocked.add("crit")
    tasks = await enqueue(q, full("crit", klass=CRITICAL), full("std"))
    assert q.flow.top_band() == -1.0
    q.step.room = 1
    q.flow.kick()
    assert q.step.order == []  # the standard one was not tried past the critical one
    q.step.blocked.clear()
    assert await drain(q, 1) == ["crit", "std"]
    await asyncio.gather(*tasks)
    assert q.flow.top_band() is None


async def test_strict_bands_hold_only_on_the_pairs_the_higher_band_waits_for() -> None:
    """A critical request that finds no room on its pair keeps the standard one behind it
    on that pair waiting, not a standard one whose fleet is another pair (another family's
    request is not held behind it)."""
    q = Queue()
    q.step.blocked.add("crit")
    crit, same = full("crit", klass=CRITICAL), full("same")
    other = full("other")
    other.pairs = frozenset({"fam2@int4"})
    tasks = await enqueue(q, crit, same, other)
    assert q.flow.top_band(frozenset({"fam@fp16"})) == -1.0
    assert q.flow.top_band(frozenset({"fam2@int4"})) == -0.75
    q.step.room = 1
    q.flow.kick()
    assert q.step.order == ["other"]
    q.step.blocked.clear()
    q.step.room = 2
    q.flow.kick()
    await asyncio.gather(*tasks)
    assert q.step.order == ["other", "crit", "same"]
    assert q.flow.top_band(frozenset({"fam@fp16"})) is None


async def test_a_wait_that_ended_in_this_turn_is_not_dispatched_by_a_kick_before_it_leaves() -> (
    None
):
    """A waiter's deadline (or its client going) cancels its future at once, but its task
    leaves the queue only when it next runs; a kick in between must not decide it again
    (before: `again` took a share no one freed, then InvalidStateError on the cancelled
    future, as a four-worker component run hit in test_flow.py)."""
    q = Queue()
    first, second = await enqueue(q, full("a"), full("b"))
    first.cancel()  # cancels the waiter's future now; the task runs its cleanup later
    q.step.room = 2
    q.flow.kick()  # in the same turn: a's wait has ended, b is dispatched
    assert q.step.order == ["b"]
    assert await second == "b"
    with pytest.raises(asyncio.CancelledError):
        await first
    assert len(q.flow) == 0
