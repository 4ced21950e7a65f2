"""The HTTP door's queue (docs/data_plane.md, "Flow control"): a request every pair is full
for waits in this replica's queue instead of a 429, is dispatched when a request finishes,
and is refused only once its budget no longer allows the wait."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field

from contracts.routing_table import RoutingTable
from data_plane.app import OVERSHOOT
from data_plane.resilience.overshoot import MIN_SAMPLES
from data_plane.upstream.port import UpstreamRequest
from tests.component.data_plane.conftest import CHAT_BODY, Harness, MakeHarness
from tests.component.data_plane.fakes import FakeResponse, chat_json, make_table, pair_entry
from tests.support.waiting import eventually

URL = "http://fp16-a"
BODY = json.dumps(CHAT_BODY).encode()
STANDARD = {"priority": "standard"}


def one_slot() -> RoutingTable:
    """One pair predicted at 1.008 s for the 8-token answer, profiled at one request at a
    time: full with one in flight, whatever the class."""
    entry = pair_entry("fam", "fp16", urls=[URL], ttft_base_s=1.0)
    entry["latency"]["max_profiled_load"] = 1
    return make_table([entry])


def holding(seconds: float) -> dict[str, Callable[[UpstreamRequest], FakeResponse]]:
    return {URL: lambda r: FakeResponse(body=chat_json(), delays_s={0: seconds})}


def held_until(release: asyncio.Event) -> dict[str, Callable[[UpstreamRequest], FakeResponse]]:
    """Answers held until the test sets `release`: a request that must find the pair full is
    sent while it is, however slow the machine (a 0.3 s hold ran out first in a make test
    beside other suites: the second request went in without waiting)."""
    return {URL: lambda r: FakeResponse(body=chat_json(), gate=release)}


async def ask(h: Harness, headers: dict[str, str]) -> tuple[int, dict[str, str]]:
    resp = await h.client.post("/v1/chat/completions", data=BODY, headers=headers)
    await resp.read()
    return resp.status, dict(resp.headers)


async def test_a_request_waits_for_a_full_pair_and_goes_in_when_one_finishes(
    make_harness: MakeHarness,
) -> None:
    release = asyncio.Event()
    h = await make_harness(one_slot(), routes=held_until(release), engine_deadline_factor=0)
    first = asyncio.create_task(ask(h, {}))
    await eventually(lambda: len(h.upstream.requests) == 1, what="the first holds the pair")
    second = asyncio.create_task(ask(h, {}))
    await eventually(
        lambda: h.metric("gearbox_flow_queue_length", **STANDARD) == 1, what="it waits"
    )
    assert len(h.upstream.requests) == 1  # not sent to the full pair
    release.set()
    (first_status, first_headers), (second_status, second_headers) = await asyncio.gather(
        first, second
    )
    assert (first_status, second_status) == (200, 200)
    assert "X-Route-Queued-Ms" not in first_headers  # it did not wait
    assert int(second_headers["X-Route-Queued-Ms"]) >= 1  # its wait, rounded up
    assert len(h.upstream.requests) == 2
    assert h.metric("gearbox_flow_queue_length", **STANDARD) == 0
    assert h.metric("gearbox_flow_dispatched_total", **STANDARD) == 1
    assert h.metric("gearbox_flow_queued_total", tenant="anonymous", **STANDARD) == 1
    assert h.metric("gearbox_tenant_shed_total", tenant="anonymous", **STANDARD) == 0


async def test_a_waiting_request_is_refused_once_its_budget_cannot_be_met(
    make_harness: MakeHarness,
) -> None:
    """A 1.3 s budget for a 1.008 s answer leaves 0.29 s to wait; the pair is held for 5 s."""
    h = await make_harness(one_slot(), routes=holding(5.0), engine_deadline_factor=0)
    hold = asyncio.create_task(ask(h, {}))
    await eventually(lambda: len(h.upstream.requests) == 1, what="the pair is held")
    status, headers = await ask(h, {"X-Latency-Budget-Ms": "1300"})
    assert status == 429
    assert int(headers["Retry-After"]) >= 1
    assert headers["x-should-retry"] == "true"
    assert len(h.upstream.requests) == 1  # never sent
    assert h.metric("gearbox_flow_refused_total", reason="deadline", **STANDARD) == 1
    assert h.metric("gearbox_tenant_shed_total", tenant="anonymous", **STANDARD) == 1
    assert h.metric("gearbox_flow_queue_length", **STANDARD) == 0
    hold.cancel()


async def test_a_tenant_past_its_share_waits_while_the_other_goes_in(
    make_harness: MakeHarness,
) -> None:
    """A pair that sustains 4 at the flat shares (every class may fill it): a tenant holding
    2 beside another's 1 waits for its third, while the other tenant's second goes in; the
    third goes in when one of its tenant's first two finishes, and nobody is refused."""
    entry = pair_entry("fam", "fp16", urls=[URL], ttft_base_s=1.0)
    entry["latency"]["max_profiled_load"] = 4
    table = make_table([entry], policy={"priorities": {"standard": {"share": 1.0}}})
    release = asyncio.Event()
    h = await make_harness(table, routes=held_until(release), engine_deadline_factor=0)
    bursty, steady = {"x-gearbox-tenant": "bursty"}, {"x-gearbox-tenant": "steady"}
    burst = [asyncio.create_task(ask(h, bursty)) for _ in range(2)]
    await eventually(lambda: len(h.upstream.requests) == 2, what="the burst holds two")
    first = asyncio.create_task(ask(h, steady))
    await eventually(lambda: len(h.upstream.requests) == 3, what="the steady one goes in")
    third = asyncio.create_task(ask(h, bursty))
    await eventually(
        lambda: h.metric("gearbox_flow_queue_length", **STANDARD) == 1, what="it waits"
    )
    second = asyncio.create_task(ask(h, steady))
    await eventually(lambda: len(h.upstream.requests) == 4, what="the steady one's second")
    release.set()
    statuses = [s for s, _ in await asyncio.gather(*burst, first, third, second)]
    assert statuses == [200] * 5
    assert h.metric("gearbox_flow_queued_total", tenant="bursty", **STANDARD) == 1
    assert h.metric("gearbox_flow_queued_total", tenant="steady", **STANDARD) == 0


async def test_a_client_that_goes_away_leaves_the_queue_at_once(
    make_harness: MakeHarness,
) -> None:
    """Served with `handler_cancellation` (as data_plane/__main__.py serves, and aiohttp's
    TestServer always does): the waiting request's client gives up, its handler is cancelled
    and the queue is empty again while the pair is still held."""
    h = await make_harness(one_slot(), routes=holding(60.0), engine_deadline_factor=0)
    hold = asyncio.create_task(ask(h, {}))
    await eventually(lambda: len(h.upstream.requests) == 1, what="the pair is held")
    gone = asyncio.create_task(ask(h, {}))
    await eventually(
        lambda: h.metric("gearbox_flow_queue_length", **STANDARD) == 1, what="it waits"
    )
    gone.cancel()  # the client closes its connection
    await eventually(lambda: h.metric("gearbox_flow_queue_length", **STANDARD) == 0, what="it left")
    assert not hold.done()
    assert len(h.upstream.requests) == 1
    hold.cancel()


@dataclass
class Gated(FakeResponse):
    """An answer held until its gate opens; `at_engine` counts the answers being worked on."""

    gate: asyncio.Event = field(default_factory=asyncio.Event)
    at_engine: list[int] = field(default_factory=lambda: [0, 0])  # [now, most]

    def __post_init__(self) -> None:
        self.at_engine[0] += 1
        self.at_engine[1] = max(self.at_engine[1], self.at_engine[0])

    async def read(self) -> bytes:
        await self.gate.wait()
        self.at_engine[0] -= 1
        return self.body


async def test_two_requests_ending_together_dispatch_no_more_than_the_slots_they_free(
    make_harness: MakeHarness,
) -> None:
    """A pair that sustains 2, held by two requests that end in one event-loop turn, with
    three waiting: each end dispatches one, and the third waits, because a dispatched request
    counts as in flight from its decision on. Before the slot was reserved at dispatch, the
    first dispatch was not counted until its handler ran again, so the second end's wake-up
    saw a slot free that the first had taken and sent the third too (3 at the engine)."""
    entry = pair_entry("fam", "fp16", urls=[URL], ttft_base_s=1.0)
    entry["latency"]["max_profiled_load"] = 2
    table = make_table([entry], policy={"priorities": {"standard": {"share": 1.0}}})
    first, later, at_engine = asyncio.Event(), asyncio.Event(), [0, 0]

    def answer(_: UpstreamRequest) -> FakeResponse:
        gate = first if at_engine[1] < 2 and not first.is_set() else later
        return Gated(body=chat_json(), gate=gate, at_engine=at_engine)

    h = await make_harness(table, routes={URL: answer}, engine_deadline_factor=0)
    held = [asyncio.create_task(ask(h, {})) for _ in range(2)]
    await eventually(lambda: at_engine[0] == 2, what="two hold the pair")
    waiting = [asyncio.create_task(ask(h, {})) for _ in range(3)]
    await eventually(
        lambda: h.metric("gearbox_flow_queue_length", **STANDARD) == 3, what="three wait"
    )
    first.set()  # both end in one turn of the loop
    await eventually(lambda: at_engine[0] == 2, what="two dispatched")
    await eventually(
        lambda: h.metric("gearbox_flow_dispatched_total", **STANDARD) >= 2, what="counted"
    )
    assert h.metric("gearbox_flow_queue_length", **STANDARD) == 1
    assert at_engine[1] == 2
    later.set()
    assert [s for s, _ in await asyncio.gather(*held, *waiting)] == [200] * 5
    assert at_engine[1] == 2


async def test_a_tenants_short_answers_stretch_its_own_wait_and_not_another_tenants(
    make_harness: MakeHarness,
) -> None:
    """A pair predicted at 1 + 0.002 s a token, one request at a time; requests allow 1000
    tokens (3.0 s) within a 3.5 s budget. Tenant `short` has had 16 answers of 20 tokens: its
    requests are predicted at 1.04 s and may wait 2.46 s; tenant `long`, with no answers yet,
    is predicted at its max_tokens and may wait 0.5 s. With the pair held 1.2 s, `short`'s
    request waits and is served, `long`'s is refused at its deadline (on c680376 both were
    judged at max_tokens, and both refused)."""
    entry = pair_entry("fam", "fp16", urls=[URL], ttft_base_s=1.0, tpot_base_s=0.002)
    entry["latency"]["max_profiled_load"] = 1
    hold = [0.0]

    def answer(_: UpstreamRequest) -> FakeResponse:
        return FakeResponse(body=chat_json(completion_tokens=20), delays_s={0: hold[0]})

    h = await make_harness(make_table([entry]), routes={URL: answer}, engine_deadline_factor=0)
    body = json.dumps({**CHAT_BODY, "max_tokens": 1000}).encode()

    async def ask_as(tenant: str) -> int:
        headers = {"x-gearbox-tenant": tenant, "X-Latency-Budget-Ms": "3500"}
        resp = await h.client.post("/v1/chat/completions", data=body, headers=headers)
        await resp.read()
        return resp.status

    for _ in range(16):
        assert await ask_as("short") == 200
    hold[0] = 1.2
    holder = asyncio.create_task(ask_as("holder"))
    await eventually(lambda: len(h.upstream.requests) == 17, what="the pair is held")
    hold[0] = 0.0
    asked = [asyncio.create_task(ask_as(t)) for t in ("short", "long")]
    assert await asyncio.gather(holder, *asked) == [200, 200, 429]
    assert h.metric("gearbox_flow_refused_total", reason="deadline", **STANDARD) == 1
    assert h.metric("gearbox_flow_dispatched_total", **STANDARD) == 1


async def test_a_wait_in_the_queue_is_not_counted_as_the_engines_lateness(
    make_harness: MakeHarness,
) -> None:
    """Issue 32, finding 1: the margin admission takes off a budget measures the engine's own
    lateness, from dispatch. Nine requests at once on a one-slot pair predicted at 0.5 s that
    answers in 0.15 s: eight wait up to 1.2 s in the queue, and every engine is early, so
    the pair's margin stays 0 (before the fix, the waits made it 0.5 s: less capacity, more
    queueing, a larger margin)."""
    entry = pair_entry("fam", "fp16", urls=[URL], ttft_base_s=0.5)
    entry["latency"]["max_profiled_load"] = 1

    def engine(r: UpstreamRequest) -> FakeResponse:
        h.clock.advance(0.15)  # the router's clock runs as the engine works
        return FakeResponse(body=chat_json(), delays_s={0: 0.15})

    routes = {URL: engine}
    h = await make_harness(make_table([entry]), routes=routes, engine_deadline_factor=0)
    budget = {"X-Latency-Budget-Ms": "10000"}
    answers = await asyncio.gather(*(ask(h, budget) for _ in range(MIN_SAMPLES + 1)))
    assert [s for s, _ in answers] == [200] * (MIN_SAMPLES + 1)
    assert h.metric("gearbox_flow_dispatched_total", **STANDARD) == MIN_SAMPLES  # they waited
    margin_s, _ = h.app[OVERSHOOT].raw()["fam@fp16"]
    assert margin_s == 0.0


async def test_requests_that_join_later_are_not_counted_as_the_engines_lateness(
    make_harness: MakeHarness,
) -> None:
    """Issue 32, the light tenant's misses: a pair's margin compared each answer with the
    prediction at the load its decision saw, so an answer that requests joined after it
    counted their load as the engine's lateness. In the bench an engine exactly as profiled
    got a 75 ms margin, which cut what the pair sustains from 8 to 5 and the standard
    class's line from 6 to 3. Here each answer takes what the table predicts at 2 in flight
    (its prediction grows 50 ms a request):
    the first of each pair of requests was decided at 1, the second joined it. The margin
    stays 0 (on cfcc038 it was 47 ms: the second request's 50 ms, less 3 of output)."""
    entry = pair_entry("fam", "fp16", urls=[URL], ttft_base_s=0.1)
    entry["latency"]["ttft_per_load_s"] = 0.05
    gates: list[asyncio.Event] = []

    def engine(r: UpstreamRequest) -> FakeResponse:
        gates.append(asyncio.Event())
        return FakeResponse(body=chat_json(), gate=gates[-1])

    h = await make_harness(make_table([entry]), routes={URL: engine}, engine_deadline_factor=0)
    budget = {"X-Latency-Budget-Ms": "10000"}

    def sent(count: int) -> Callable[[], bool]:
        return lambda: len(h.upstream.requests) == len(gates) == count

    for n in range(0, MIN_SAMPLES, 2):
        first = asyncio.create_task(ask(h, budget))
        await eventually(sent(n + 1), what="the first is sent")
        joined = asyncio.create_task(ask(h, budget))
        await eventually(sent(n + 2), what="the second joins")
        h.clock.advance(0.2)  # as predicted at 2 in flight: 0.1 + 2 x 0.05 (+ 3 ms output)
        gates[n].set()
        assert (await first)[0] == 200
        gates[n + 1].set()
        assert (await joined)[0] == 200
    margin_s, _ = h.app[OVERSHOOT].raw()["fam@fp16"]
    assert margin_s == 0.0


async def test_a_queued_request_goes_only_where_what_is_left_of_its_budget_is_met(
    make_harness: MakeHarness,
) -> None:
    """Issue 32, finding 2: a queued request is decided again on what is left of its budget.
    fam@int4 (cheap, 0.11 s) and fam@fp16 (1.01 s), one slot each, both held; a 1.5 s
    request waits. fp16 frees at 0.8 s, when 0.7 s is left: too little for fp16's 1.01 s,
    so it waits on and goes to int4 when that frees at 1.2 s (0.3 s left). Before the fix it
    was sent to fp16 on its whole budget, and answered late."""
    int4_url, fp16_url = "http://int4-a", "http://fp16-a"
    cheap = pair_entry("fam", "int4", urls=[int4_url], ttft_base_s=0.1, usd_per_mtok=0.5)
    slow = pair_entry("fam", "fp16", urls=[fp16_url], ttft_base_s=1.0)
    for entry in (cheap, slow):
        entry["latency"]["max_profiled_load"] = 1
    held = {int4_url: [1.2], fp16_url: [0.8]}  # each pair's first answer is held, then none

    def answer(url: str) -> Callable[[UpstreamRequest], FakeResponse]:
        return lambda r: FakeResponse(
            body=chat_json(), delays_s={0: held[url].pop() if held[url] else 0.0}
        )

    routes = {url: answer(url) for url in held}
    h = await make_harness(make_table([cheap, slow]), routes=routes, engine_deadline_factor=0)

    async def pinned(model: str) -> int:
        body = json.dumps({**CHAT_BODY, "model": model}).encode()
        resp = await h.client.post(
            "/v1/chat/completions", data=body, headers={"X-Latency-Budget-Ms": "10000"}
        )
        await resp.read()
        return resp.status

    holds = [asyncio.create_task(pinned(m)) for m in ("fam@int4", "fam@fp16")]
    await eventually(lambda: len(h.upstream.requests) == 2, what="both pairs are held")
    status, headers = await ask(h, {"X-Latency-Budget-Ms": "1500"})
    assert status == 200
    assert headers["X-Route-Pair"] == "fam@int4"
    assert sum(r.url.startswith(fp16_url) for r in h.upstream.requests) == 1
    assert await asyncio.gather(*holds) == [200, 200]


CRITICAL = {"priority": "critical"}


async def test_a_queued_request_sent_past_what_is_left_at_the_load_it_joins_is_counted(
    make_harness: MakeHarness,
) -> None:
    """Issue 32, the critical burst's "router late" misses: a queued request no pair proves
    what is left of its budget for goes where its pair would answer *alone* within it,
    whatever that pair holds; where the pair is predicted past what is left at the load it
    joins, that is counted (`gearbox_flow_sent_past_budget_total`). One pair predicted at
    2.02 s alone and 4.02 s beside another (sustains 2 within 4.4 s), held by two critical
    requests; a third waits. The first frees at 0.7 s, when 3.7 s is left: it is sent
    beside the second (predicted 4.02 s), and counted."""
    entry = pair_entry("fam", "fp16", urls=[URL], ttft_base_s=0.01)
    entry["latency"]["ttft_per_load_s"] = 2.0
    entry["latency"]["max_profiled_load"] = 2
    gates: list[asyncio.Event] = []

    def engine(r: UpstreamRequest) -> FakeResponse:
        gates.append(asyncio.Event())
        return FakeResponse(body=chat_json(), gate=gates[-1])

    h = await make_harness(
        make_table([entry]), routes={URL: engine}, engine_deadline_factor=0,
        priority_header_trusted=True,
    )  # fmt: skip
    critical = {"X-Latency-Budget-Ms": "4400", "X-Priority": "critical"}
    holds = []
    for n in (1, 2):
        holds.append(asyncio.create_task(ask(h, critical)))
        await eventually(lambda n=n: len(gates) == n, what=f"hold {n} is sent")  # type: ignore[misc]
    waiting = asyncio.create_task(ask(h, critical))
    await eventually(lambda: h.metric("gearbox_flow_queue_length", **CRITICAL) == 1, what="waits")
    await asyncio.sleep(0.7)
    assert h.metric("gearbox_flow_sent_past_budget_total", **CRITICAL) == 0
    gates[0].set()
    await eventually(lambda: len(gates) == 3, what="it is sent beside the second")
    assert h.metric("gearbox_flow_sent_past_budget_total", **CRITICAL) == 1
    for gate in gates:
        gate.set()
    status, headers = await waiting
    assert status == 200
    assert int(headers["X-Route-Predicted-Latency-Ms"]) > 4000  # on its whole budget
    assert [s for s, _ in await asyncio.gather(*holds)] == [200, 200]


async def test_a_critical_request_sent_at_its_deadline_past_its_budget_is_counted(
    make_harness: MakeHarness,
) -> None:
    """A critical request is never refused: at its deadline it goes in anyway. Where its
    pair is then predicted, at the load it joins, past what is left of its budget, that is
    counted (`gearbox_flow_sent_past_budget_total`): a pair predicted at 0.21 s alone and
    0.41 s beside another, held by one, and a 0.45 s budget (0.24 s to wait): sent beside the
    held one with 0.21 s left."""
    entry = pair_entry("fam", "fp16", urls=[URL], ttft_base_s=0.002)
    entry["latency"]["ttft_per_load_s"] = 0.2
    entry["latency"]["max_profiled_load"] = 1
    release = asyncio.Event()
    h = await make_harness(
        make_table([entry]), routes=held_until(release), engine_deadline_factor=0,
        priority_header_trusted=True,
    )  # fmt: skip
    hold = asyncio.create_task(ask(h, {"X-Latency-Budget-Ms": "10000"}))
    await eventually(lambda: len(h.upstream.requests) == 1, what="the pair is held")
    late = asyncio.create_task(ask(h, {"X-Latency-Budget-Ms": "450", "X-Priority": "critical"}))
    await eventually(lambda: len(h.upstream.requests) == 2, what="sent at its deadline")
    assert h.metric("gearbox_flow_sent_past_budget_total", **CRITICAL) == 1
    assert h.metric("gearbox_flow_dispatched_total", **CRITICAL) == 1
    release.set()
    assert [s for s, _ in await asyncio.gather(hold, late)] == [200, 200]


async def test_a_critical_request_waits_in_the_top_band_and_goes_first(
    make_harness: MakeHarness,
) -> None:
    """Issue 32, finding 3: a critical request every pair is full for is not sent onto the
    full engine (before: 2 in flight on a pair that holds 1); it waits in the top band and
    is dispatched before the standard request queued ahead of it when the slot frees."""
    release = asyncio.Event()
    h = await make_harness(
        one_slot(), routes=held_until(release), engine_deadline_factor=0,
        priority_header_trusted=True,
    )  # fmt: skip
    budget = {"X-Latency-Budget-Ms": "10000"}
    done: list[str] = []

    async def sent(name: str, headers: dict[str, str]) -> int:
        status, _ = await ask(h, {**budget, **headers})
        done.append(name)
        return status

    hold = asyncio.create_task(sent("hold", {}))
    await eventually(lambda: len(h.upstream.requests) == 1, what="the pair is held")
    standard = asyncio.create_task(sent("standard", {}))
    await eventually(lambda: h.metric("gearbox_flow_queue_length", **STANDARD) == 1, what="waits")
    critical = asyncio.create_task(sent("critical", {"X-Priority": "critical"}))
    await eventually(lambda: h.metric("gearbox_flow_queue_length", **CRITICAL) == 1, what="waits")
    assert len(h.upstream.requests) == 1  # not sent onto the full engine
    release.set()
    assert list(await asyncio.gather(hold, critical, standard)) == [200, 200, 200]
    assert done == ["hold", "critical", "standard"]
    assert h.metric("gearbox_flow_dispatched_total", **CRITICAL) == 1


async def test_a_critical_request_is_sent_not_refused_at_its_deadline(
    make_harness: MakeHarness,
) -> None:
    """A critical request is never refused: with a 1.3 s budget for a 1.008 s answer it
    waits its 0.29 s of slack, then goes to the pair anyway (as it did without a queue),
    where a standard request is refused (`test_a_waiting_request_is_refused_once_...`)."""
    held = [3.0]
    routes = {
        URL: lambda r: FakeResponse(body=chat_json(), delays_s={0: held.pop() if held else 0})
    }
    h = await make_harness(
        one_slot(), routes=routes, engine_deadline_factor=0, priority_header_trusted=True
    )
    hold = asyncio.create_task(ask(h, {}))
    await eventually(lambda: len(h.upstream.requests) == 1, what="the pair is held")
    status, _ = await ask(h, {"X-Latency-Budget-Ms": "1300", "X-Priority": "critical"})
    assert status == 200
    assert len(h.upstream.requests) == 2
    assert h.metric("gearbox_flow_queued_total", tenant="anonymous", **CRITICAL) == 1
    assert h.metric("gearbox_flow_dispatched_total", **CRITICAL) == 1
    assert h.metric("gearbox_flow_refused_total", reason="deadline", **CRITICAL) == 0
    assert not hold.done()
    hold.cancel()


async def test_at_its_deadline_best_effort_serves_late_on_an_idle_pair_not_a_429(
    make_harness: MakeHarness,
) -> None:
    """A 0.5 s budget only fam@int4 (0.11 s, one slot) meets; it is held by a request with a
    long budget. fam@fp16 (1.01 s)
    keeps the floor and is idle: once the wait its budget allows is over (0.39 s), the
    best-effort request is served there, late, instead of a 429 (before: 429 with fp16
    idle, `make demo-sim` in CI). A second such request finds fp16 busy too and is refused,
    and strict mode keeps the 429."""
    int4_url, fp16_url = "http://int4-a", "http://fp16-a"
    cheap = pair_entry("fam", "int4", urls=[int4_url], ttft_base_s=0.1, usd_per_mtok=0.5)
    slow = pair_entry("fam", "fp16", urls=[fp16_url], ttft_base_s=1.0)
    for entry in (cheap, slow):
        entry["latency"]["max_profiled_load"] = 1
    release = asyncio.Event()
    routes = {url: held_until(release)[URL] for url in (int4_url, fp16_url)}
    h = await make_harness(make_table([cheap, slow]), routes=routes, engine_deadline_factor=0)
    tight = {"X-Latency-Budget-Ms": "500"}
    hold = asyncio.create_task(ask(h, {"X-Latency-Budget-Ms": "60000"}))
    await eventually(lambda: len(h.upstream.requests) == 1, what="int4 is held")
    late = asyncio.create_task(ask(h, tight))
    await eventually(lambda: len(h.upstream.requests) == 2, what="the idle fp16 took one")
    assert h.upstream.requests[1].url.startswith(fp16_url)
    status, _ = await ask(h, tight)  # both pairs busy now: refused
    assert status == 429
    strict_status, _ = await ask(h, {**tight, "X-Budget-Mode": "strict"})
    assert strict_status == 429
    release.set()
    (held_status, _), (late_status, late_headers) = await asyncio.gather(hold, late)
    assert (held_status, late_status) == (200, 200)
    assert late_headers["X-Route-Pair"] == "fam@fp16"
    assert late_headers["X-Route-Reason"].startswith("best_effort_latency_relaxed;")
    assert len(h.upstream.requests) == 2
    assert h.metric("gearbox_flow_refused_total", reason="deadline", **STANDARD) == 2
    assert h.metric("gearbox_flow_dispatched_total", **STANDARD) == 1


async def test_a_request_behind_a_higher_band_is_served_late_on_a_pair_nobody_waits_for(
    make_harness: MakeHarness,
) -> None:
    """A standard request whose 0.5 s budget only fam@int4 meets waits behind a critical
    request that waits for int4 too (strict bands), while fam@fp16 (3 s, keeps the floor) is
    idle and outside the critical request's fleet (its 2 s budget). At the standard request's
    deadline it is served late on fp16, as one whose fleet was full is (before: 429, fp16
    idle); the critical request still gets int4 first."""
    int4_url, fp16_url = "http://int4-a", "http://fp16-a"
    cheap = pair_entry("fam", "int4", urls=[int4_url], ttft_base_s=0.1, usd_per_mtok=0.5)
    slow = pair_entry("fam", "fp16", urls=[fp16_url], ttft_base_s=3.0)
    for entry in (cheap, slow):
        entry["latency"]["max_profiled_load"] = 1
    release = asyncio.Event()
    routes = {url: held_until(release)[URL] for url in (int4_url, fp16_url)}
    h = await make_harness(
        make_table([cheap, slow]), routes=routes, engine_deadline_factor=0,
        priority_header_trusted=True,
    )  # fmt: skip
    hold = asyncio.create_task(ask(h, {"X-Latency-Budget-Ms": "60000"}))
    await eventually(lambda: len(h.upstream.requests) == 1, what="int4 is held")
    critical = asyncio.create_task(
        ask(h, {"X-Latency-Budget-Ms": "2000", "X-Priority": "critical"})
    )
    await eventually(lambda: h.metric("gearbox_flow_queue_length", **CRITICAL) == 1, what="waits")
    late = asyncio.create_task(ask(h, {"X-Latency-Budget-Ms": "500"}))
    await eventually(
        lambda: any(r.url.startswith(fp16_url) for r in h.upstream.requests),
        what="the idle fp16 took the standard request",
    )
    release.set()
    results = await asyncio.gather(hold, critical, late)
    assert [status for status, _ in results] == [200, 200, 200]
    (_, critical_headers), (_, late_headers) = results[1], results[2]
    assert late_headers["X-Route-Pair"] == "fam@fp16"
    assert late_headers["X-Route-Reason"].startswith("best_effort_latency_relaxed;")
    assert critical_headers["X-Route-Pair"] == "fam@int4"
    assert h.metric("gearbox_flow_refused_total", reason="deadline", **STANDARD) == 0
    assert h.metric("gearbox_flow_dispatched_total", **STANDARD) == 1  # served, not refused
