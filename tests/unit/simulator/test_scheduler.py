"""Admission: at most max_running, FIFO waiting, a bounded queue, cancellation frees places."""

from __future__ import annotations

import asyncio

import pytest

from simulator.config import SimPairConfig
from simulator.engine import Engine
from simulator.scheduler import QueueFullError, Scheduler, Ticket


def admitted(ticket: Ticket) -> bool:
    return ticket.admitted  # a call, so mypy does not narrow it across awaits


async def test_fifo_admission_and_bounded_queue() -> None:
    scheduler = Scheduler(max_running=2, max_queue=2)
    first, second = scheduler.enqueue(), scheduler.enqueue()
    assert first.admitted
    assert second.admitted
    third, fourth = scheduler.enqueue(), scheduler.enqueue()
    assert (scheduler.running, scheduler.waiting) == (2, 2)
    with pytest.raises(QueueFullError):
        scheduler.enqueue()
    second.close()
    await asyncio.wait_for(third.wait(), 1)
    assert third.admitted
    assert not fourth.admitted
    assert (scheduler.running, scheduler.waiting) == (2, 1)
    first.close()  # hands its slot to `fourth`
    third.close()
    assert (scheduler.running, scheduler.waiting) == (1, 0)
    await asyncio.wait_for(fourth.wait(), 1)
    assert admitted(fourth)
    fourth.close()
    fourth.close()  # idempotent
    assert (scheduler.running, scheduler.waiting) == (0, 0)


async def test_cancelled_waiter_leaves_the_queue() -> None:
    scheduler = Scheduler(max_running=1, max_queue=5)
    holder = scheduler.enqueue()
    waiting = scheduler.enqueue()
    task = asyncio.create_task(waiting.wait())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    waiting.close()
    assert scheduler.waiting == 0
    late = scheduler.enqueue()
    holder.close()
    await asyncio.wait_for(late.wait(), 1)
    assert late.admitted
    assert scheduler.running == 1


async def test_slot_handed_to_a_cancelled_task_is_given_back() -> None:
    scheduler = Scheduler(max_running=1, max_queue=5)
    holder = scheduler.enqueue()
    waiting = scheduler.enqueue()
    task = asyncio.create_task(waiting.wait())
    await asyncio.sleep(0)
    holder.close()  # the slot moves to `waiting` ...
    task.cancel()  # ... whose task is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await task
    assert waiting.admitted
    waiting.close()
    assert (scheduler.running, scheduler.waiting) == (0, 0)


async def test_no_queue_rejects_at_once() -> None:
    scheduler = Scheduler(max_running=1, max_queue=0)
    scheduler.enqueue()
    with pytest.raises(QueueFullError):
        scheduler.enqueue()


async def test_engine_reports_its_peak_in_flight_until_reset() -> None:
    config = SimPairConfig(
        name="m",
        family="llama",
        quantization="fp8",
        ttft_base_s=0.0,
        tpot_base_s=0.0,
        max_running=2,
        max_queue=4,
    )
    engine = Engine(config, {})
    tickets = [engine.enqueue() for _ in range(3)]  # 2 running + 1 waiting
    for ticket in tickets:
        ticket.close()
    engine.enqueue().close()
    assert engine.stats().peak_in_flight == 3
    engine.reset()
    assert engine.stats().peak_in_flight == 0
