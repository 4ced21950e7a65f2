"""Canary items on the data plane (docs/accuracy.md "Canary items"): held-out items with known
answers sent to each pair through the attempt path, at the configured rate and within the
dollar budget per pair, scored by the category's scorer and counted in the feedback summaries,
never as client traffic."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import orjson
import pytest

from contracts.code_tests import CodeLimits, CodeTestRunner
from contracts.policy import Policy
from data_plane.app import CANARY, FEEDBACK, HEALTH, STORE
from data_plane.checks.canary_items import (
    MAX_IN_FLIGHT,
    SHIPPED_ITEMS,
    load_items,
    parse_items,
    worst_cost_usd,
)
from data_plane.resilience.breaker import BreakerState
from data_plane.settings import DataPlaneSettings
from data_plane.upstream.port import UpstreamRequest
from tests.component.data_plane import conftest as component
from tests.component.data_plane.conftest import Harness, MakeHarness
from tests.component.data_plane.fakes import (
    FakeResponse,
    chat_json,
    make_table,
    ok_json,
    pair_entry,
    two_pair_table,
)
from tests.support.waiting import eventually

make_harness = component.make_harness
FP16, INT4 = "http://fp16-a", "http://int4-a"
ITEM = {"prompt": "2 - 31 =", "expected": -29, "scorer": "numeric", "category": "math"}


def _items(tmp_path: Path) -> Path:
    path = tmp_path / "canary.jsonl"
    path.write_text(json.dumps({**ITEM, "max_tokens": 8}) + "\n", encoding="utf-8")
    return path


async def _harness(make_harness: MakeHarness, tmp_path: Path, usd_per_hour: float) -> Harness:
    return await make_harness(
        two_pair_table([FP16], [INT4]),
        routes={FP16: ok_json("The answer is -29."), INT4: ok_json("-31")},
        feedback_canary_items_per_minute=30.0,  # one item per pair every 2 s
        feedback_canary_usd_per_hour=usd_per_hour,
        feedback_canary_items_file=str(_items(tmp_path)),
    )


def _items_metric(h: Harness, pair: str, outcome: str) -> float:
    return h.metric("gearbox_canary_items_total", pair=pair, category="math", outcome=outcome)


async def test_each_pair_gets_canaries_scored_and_reported(
    make_harness: MakeHarness, tmp_path: Path
) -> None:
    h = await _harness(make_harness, tmp_path, usd_per_hour=1.0)
    table = h.app[STORE].current
    assert table is not None
    assert await h.app[CANARY].send_due(table) == 2
    sent = [orjson.loads(r.body) for r in h.upstream.requests]
    assert [r.url.split("/v1/")[1] for r in h.upstream.requests] == ["completions"] * 2
    assert {(b["model"], b["prompt"], b["temperature"], b["max_tokens"]) for b in sent} == {
        ("served-fam-fp16", "2 - 31 =", 0.0, 8),
        ("served-fam-int4", "2 - 31 =", 0.0, 8),
    }
    assert _items_metric(h, "fam@fp16", "right") == 1
    assert _items_metric(h, "fam@int4", "wrong") == 1
    assert h.metric("gearbox_canary_cost_usd_total", pair="fam@fp16") > 0.0
    assert await h.app[CANARY].send_due(table) == 0  # the rate: next slot in 2 s
    h.clock.advance(2.0)
    assert await h.app[CANARY].send_due(table) == 2
    (report,) = h.app[FEEDBACK].drain("dp", now=1.0)
    assert report.table_version == table.version
    assert [(c.pair, c.category, c.n, c.right) for c in report.canary] == [
        ("fam@fp16", "math", 2, 2),
        ("fam@int4", "math", 2, 0),
    ]
    assert report.cells == ()  # no latency feedback: not client traffic
    assert report.mix == ()


async def test_canaries_stay_within_the_dollar_budget_per_pair(
    make_harness: MakeHarness, tmp_path: Path
) -> None:
    h = await _harness(make_harness, tmp_path, usd_per_hour=0.0)
    table = h.app[STORE].current
    assert table is not None
    assert await h.app[CANARY].send_due(table) == 0
    assert h.upstream.requests == []
    assert _items_metric(h, "fam@fp16", "over_budget") == 1


async def test_a_disagreement_raises_the_pairs_canary_rate_and_decides_nothing(
    make_harness: MakeHarness, tmp_path: Path
) -> None:
    """Agreement re-asks only ask for more evidence: int4's answer disagrees with fp16's, so
    int4 gets one canary item before its next slot; fp16 does not."""
    h = await make_harness(
        two_pair_table([FP16], [INT4], policy={"accuracy_check": {"sample_rate": 1.0}}),
        routes={FP16: ok_json("12"), INT4: ok_json("13")},
        feedback_canary_items_per_minute=30.0,
        feedback_canary_items_file=str(_items(tmp_path)),
    )
    table = h.app[STORE].current
    assert table is not None
    assert await h.app[CANARY].send_due(table) == 2  # both slots
    body = json.dumps(
        {"model": "fam@int4", "temperature": 0, "max_tokens": 16,
         "messages": [{"role": "user", "content": "What is 5 + 7?"}]}
    )  # fmt: skip
    resp = await h.client.post(
        "/v1/chat/completions", data=body, headers={"X-Task-Category": "math"}
    )
    assert resp.status == 200

    def disagreed() -> bool:
        return (
            h.metric(
                "gearbox_accuracy_checks_total",
                pair="fam@int4",
                category="math",
                outcome="disagree",
            )
            == 1
        )

    await eventually(disagreed, what="the re-ask disagreed")
    before = len(h.upstream.requests)
    assert await h.app[CANARY].send_due(table) == 1  # int4's extra item, before its slot
    assert [r.url.startswith(INT4) for r in h.upstream.requests[before:]] == [True]
    assert await h.app[CANARY].send_due(table) == 0
    assert _items_metric(h, "fam@int4", "wrong") == 2


def test_a_bad_item_line_is_named() -> None:
    with pytest.raises(ValueError, match="line 2"):
        parse_items([json.dumps(ITEM), json.dumps({**ITEM, "scorer": "judge"})])


CHAT_ITEM = {
    "messages": [
        {"role": "system", "content": "Answer in one word."},
        {"role": "user", "content": "Which season follows spring?"},
    ],
    "expected": "summer",
    "scorer": "contains",
    "category": "chat",
    "max_tokens": 16,
}


async def test_a_chat_item_is_asked_on_the_chat_path_and_scored_by_its_scorer(
    make_harness: MakeHarness, tmp_path: Path
) -> None:
    """Free text: a `messages` item goes to /v1/chat/completions, greedy, and the answer is
    scored by the item's scorer (`contains`), as the profiler scores it. On c680376 chat
    items were skipped: nothing was sent."""
    path = tmp_path / "chat.jsonl"
    path.write_text(json.dumps(CHAT_ITEM) + "\n", encoding="utf-8")
    h = await make_harness(
        two_pair_table([FP16], [INT4]),
        routes={FP16: ok_json("Summer, of course."), INT4: ok_json("Autumn.")},
        feedback_canary_items_per_minute=30.0,
        feedback_canary_items_file=str(path),
    )
    table = h.app[STORE].current
    assert table is not None
    assert await h.app[CANARY].send_due(table) == 2
    assert {r.url.split("/v1/")[1] for r in h.upstream.requests} == {"chat/completions"}
    sent = orjson.loads(h.upstream.requests[0].body)
    assert sent["messages"] == CHAT_ITEM["messages"]
    assert (sent["temperature"], sent["max_tokens"]) == (0.0, 16)
    chat = {"pair": "fam@fp16", "category": "chat"}
    assert h.metric("gearbox_canary_items_total", **chat, outcome="right") == 1
    chat["pair"] = "fam@int4"
    assert h.metric("gearbox_canary_items_total", **chat, outcome="wrong") == 1


def test_chat_items_parse_and_a_bad_one_is_named() -> None:
    (item,) = parse_items([json.dumps(CHAT_ITEM)])["chat"]
    assert item.path == "/v1/chat/completions"
    assert item.chars == len("Answer in one word.") + len("Which season follows spring?")
    no_user = {**CHAT_ITEM, "messages": [{"role": "system", "content": "Hi."}]}
    with pytest.raises(ValueError, match="line 2: `messages` need a user message"):
        parse_items([json.dumps(ITEM), json.dumps(no_user)])
    bad_role = {**CHAT_ITEM, "messages": [{"role": "tool", "content": "x"}]}
    with pytest.raises(ValueError, match="line 1"):
        parse_items([json.dumps(bad_role)])


def test_the_shipped_items_are_the_profilers_held_out_sets() -> None:
    """On by default: with no item file named, the data plane sends the profiler's held-out
    items (no built-in eval item repeats them), every category the profiles measure."""
    holdout = sorted((Path(__file__).parents[3] / "profiler/evalsets/holdout").glob("*.jsonl"))
    lines = [line for p in holdout for line in p.read_text(encoding="utf-8").splitlines()]
    assert SHIPPED_ITEMS.read_text(encoding="utf-8").splitlines() == lines
    shipped = load_items([SHIPPED_ITEMS])
    assert sorted(shipped) == ["chat", "code", "extraction", "math", "reasoning"]
    assert {c: len(items) for c, items in shipped.items()} == {
        "chat": 40, "code": 46, "extraction": 40, "math": 40, "reasoning": 40,
    }  # fmt: skip
    assert sum(i.tests is not None for i in shipped["code"]) == 6  # holdout/code-tests.jsonl


async def test_with_no_file_named_the_shipped_items_are_sent(make_harness: MakeHarness) -> None:
    h = await make_harness(
        two_pair_table([FP16], [INT4]),
        routes={FP16: ok_json("-29"), INT4: ok_json("-29")},
        feedback_canary_items_per_minute=30.0,
    )
    table = h.app[STORE].current
    assert table is not None
    assert await h.app[CANARY].send_due(table) == 2
    prompts = {orjson.loads(r.body)["prompt"] for r in h.upstream.requests}
    shipped = {i.prompt for items in load_items([SHIPPED_ITEMS]).values() for i in items}
    assert prompts <= shipped


def test_canaries_are_on_by_default() -> None:
    """A fresh deployment sends them at the sized rate and budget (docs/accuracy.md)."""
    feedback = DataPlaneSettings().feedback
    assert (feedback.canary_items_per_minute, feedback.canary_usd_per_hour) == (240.0, 0.5)
    assert feedback.canary_items_file == ""
    assert Policy().accuracy_check.demote is True


async def test_a_hanging_pair_holds_back_neither_the_others_nor_its_own_slots(
    make_harness: MakeHarness, tmp_path: Path
) -> None:
    """At 240 items a minute one slot is 0.25 s: the sender may not wait for one pair's
    answer before asking the next. int4 never answers: fp16 still gets an item every slot,
    and int4 has at most `MAX_IN_FLIGHT` items waiting. On c680376 the sender awaited each
    item in turn and stopped at int4's first. (No engine allowance here, `progress_factor`
    0: an item waits until its timeout, not its allowance, as the next test has it.)"""

    def hang(_request: UpstreamRequest) -> FakeResponse:
        return FakeResponse(body=chat_json("-29"), delays_s={0: 3600.0})

    h = await make_harness(
        two_pair_table([FP16], [INT4]),
        routes={FP16: ok_json("-29"), INT4: hang},
        feedback_canary_items_per_minute=240.0,
        feedback_canary_usd_per_hour=10.0,  # the rate, not the budget, spaces the items
        feedback_canary_capacity_share=1.0,  # nor the capacity (1,000 tokens a second here)
        feedback_canary_items_file=str(_items(tmp_path)),
        progress_factor=0.0,
    )
    task = asyncio.create_task(h.app[CANARY].run(lambda: h.app[STORE].current))
    try:
        for slot in range(1, 9):
            await eventually(
                lambda slot=slot: _items_metric(h, "fam@fp16", "right") == slot,  # type: ignore[misc]
                what=f"fp16's item of slot {slot}",
            )
            h.clock.advance(0.25)
        assert len(h.upstream.hosts()) == 8 + MAX_IN_FLIGHT
        assert h.upstream.hosts().count(INT4) == MAX_IN_FLIGHT
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_items_waiting_at_a_hung_pair_count_in_no_load_and_give_up_without_blame(
    make_harness: MakeHarness, tmp_path: Path
) -> None:
    """int4 never answers. Its items are the router's own load (`AttemptLimit.background`):
    while they wait, the endpoint's in-flight count (what clients' allowances and decisions
    are priced with) stays 0 and no stall rule watches them; each is given up after its
    allowance for each of the pair's items in flight (about 0.2 s apiece here), counted
    `error` (a miss of its own limit), with nothing against int4's breaker. On cfcc038 they
    counted as load and waited, watched, until the timeout (300 s)."""

    def hang(_request: UpstreamRequest) -> FakeResponse:
        return FakeResponse(body=chat_json("-29"), delays_s={0: 3600.0})

    h = await make_harness(
        two_pair_table([FP16], [INT4]),
        routes={FP16: ok_json("-29"), INT4: hang},
        feedback_canary_items_per_minute=240.0,
        feedback_canary_usd_per_hour=10.0,
        feedback_canary_items_file=str(_items(tmp_path)),
    )
    task = asyncio.create_task(h.app[CANARY].run(lambda: h.app[STORE].current))
    try:
        await eventually(lambda: INT4 in h.upstream.hosts(), what="an item sent to int4")
        assert h.app[HEALTH].tracker.in_flight("fam@int4#0") == 0
        await eventually(lambda: _items_metric(h, "fam@int4", "error") == 1, what="given up")
        assert h.app[HEALTH].state("fam@int4#0") is BreakerState.CLOSED
        attempts = {"endpoint": "fam@int4#0"}
        assert h.metric("gearbox_upstream_attempts_total", **attempts,
                        outcome="ttft_budget_missed") == 1  # fmt: skip
        assert h.metric("gearbox_upstream_attempts_total", **attempts,
                        outcome="timeout_first_byte") == 0  # fmt: skip
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_dear_pair_spreads_its_budget_over_the_hour(
    make_harness: MakeHarness, tmp_path: Path
) -> None:
    """At 240 a minute fp16's items ($7.6e-5 each at worst) would spend its $0.10 in 5.5
    minutes and leave it without canaries for the rest of the hour; they are spaced 2.7 s
    apart so the budget lasts the hour (int4's, four times cheaper, 0.68 s). The unpaced
    sender (3f75c62) sent fp16 an item every 0.25 s: this test fails there at "not yet"."""
    h = await _harness(make_harness, tmp_path, usd_per_hour=0.1)
    current = h.app[STORE].current
    assert current is not None
    table = current
    fp16 = next(p for p in table.pairs if p.pair == "fam@fp16")
    (item,) = load_items([_items(tmp_path)])["math"]
    spacing_s = worst_cost_usd(fp16, item) * 3600.0 / 0.1
    assert spacing_s > 60.0 / 240.0
    assert await h.app[CANARY].send_due(table) == 2
    h.clock.advance(spacing_s - 0.01)
    before = _items_metric(h, "fam@fp16", "right")
    await h.app[CANARY].send_due(table)
    assert _items_metric(h, "fam@fp16", "right") == before  # not yet
    h.clock.advance(0.01)
    await h.app[CANARY].send_due(table)
    assert _items_metric(h, "fam@fp16", "right") == before + 1
    for _ in range(int(600 / 0.25)):  # ten minutes, a look every rate slot
        h.clock.advance(0.25)
        await h.app[CANARY].send_due(table)
    spent = h.metric("gearbox_canary_cost_usd_total", pair="fam@fp16")
    assert _items_metric(h, "fam@fp16", "over_budget") == 0
    assert spent <= 0.1 * (600 + 2 * spacing_s) / 3600
    assert _items_metric(h, "fam@fp16", "right") >= 600 / spacing_s


async def test_a_small_pairs_items_stay_within_their_share_of_its_capacity(
    make_harness: MakeHarness, tmp_path: Path
) -> None:
    """int4 sustains 40 output tokens a second (a CPU engine of `make demo`), fp16 1,000. At
    the default 2% share an item's 8 tokens fit int4's 0.8 tokens a second once every 10 s
    (6 a minute, not 240), fp16's 20 every 0.4 s; with two replicas sharing in-flight counts
    each sends int4 one every 20 s. On cfcc038 int4 got an item every 0.25 s per replica."""
    h = await make_harness(
        make_table([
            {**pair_entry("fam", "fp16", urls=[FP16], accuracy=0.9, usd_per_mtok=4.0),
             "sustained_output_tokens_per_s": 1000.0},
            {**pair_entry("fam", "int4", urls=[INT4], accuracy=0.6, precision_rank=1),
             "sustained_output_tokens_per_s": 40.0},
        ]),
        routes={FP16: ok_json("-29"), INT4: ok_json("-29")},
        feedback_canary_items_per_minute=240.0,
        feedback_canary_usd_per_hour=10.0,  # the capacity, not the budget, spaces the items
        feedback_canary_items_file=str(_items(tmp_path)),
    )  # fmt: skip
    current = h.app[STORE].current
    assert current is not None
    table, sender = current, h.app[CANARY]

    async def sent_after(seconds: float) -> tuple[float, float]:
        h.clock.advance(seconds)
        await sender.send_due(table)
        return _items_metric(h, "fam@fp16", "right"), _items_metric(h, "fam@int4", "right")

    assert await sent_after(0.0) == (1, 1)
    assert await sent_after(0.4) == (2, 1)  # fp16's next slot; int4's is 10 s on
    assert (await sent_after(9.59))[1] == 1
    assert (await sent_after(0.01))[1] == 2
    sender.count_replicas(lambda: 2)
    assert (await sent_after(10.0))[1] == 3  # its slot was taken at one replica's spacing
    assert (await sent_after(19.99))[1] == 3
    assert (await sent_after(0.01))[1] == 4  # 20 s: the share split between two replicas


async def test_no_canary_item_goes_to_a_pair_a_client_request_waits_for(
    make_harness: MakeHarness, tmp_path: Path
) -> None:
    """Canary items are the replica's own load: while a client's request waits in the flow
    queue for a full pair, the pair's due item is held back (its slot stays open) and goes
    once nobody waits; the client is dispatched first."""
    entry = pair_entry("fam", "fp16", urls=[FP16], ttft_base_s=1.0)
    entry["latency"]["max_profiled_load"] = 1
    release = asyncio.Event()
    h = await make_harness(
        make_table([entry]),
        routes={FP16: lambda r: FakeResponse(body=chat_json(), gate=release)},
        engine_deadline_factor=0,
        feedback_canary_items_per_minute=30.0,
        feedback_canary_items_file=str(_items(tmp_path)),
    )
    table = h.app[STORE].current
    assert table is not None
    body = json.dumps({"model": "auto", "messages": [{"role": "user", "content": "hi"}]})

    async def ask() -> int:
        resp = await h.client.post("/v1/chat/completions", data=body.encode())
        await resp.read()
        return resp.status

    holder = asyncio.create_task(ask())
    await eventually(lambda: len(h.upstream.requests) == 1, what="a client holds the pair")
    waiting = asyncio.create_task(ask())
    await eventually(
        lambda: h.metric("gearbox_flow_queue_length", priority="standard") == 1,
        what="a client waits for the pair",
    )
    # Before: the item went to the full pair ahead of the client (and hung on its gate).
    assert await asyncio.wait_for(h.app[CANARY].send_due(table), timeout=10) == 0
    assert len(h.upstream.requests) == 1  # no item went in ahead of the waiting client
    release.set()
    assert list(await asyncio.gather(holder, waiting)) == [200, 200]
    assert await h.app[CANARY].send_due(table) == 1  # nobody waits: its open slot is used


CODE_ITEM = {
    "prompt": 'def add(a, b):\n    """Return the sum of a and b."""\n',
    "expected": r"a\s*\+\s*b",  # the text scorer: what the item was scored by before its tests
    "scorer": "regex",
    "tests": "assert add(2, 3) == 5\nassert add(-4, 4) == 0\n",
    "category": "code",
    "max_tokens": 64,
}


def _code_metric(h: Harness, pair: str, outcome: str) -> float:
    return h.metric("gearbox_canary_items_total", pair=pair, category="code", outcome=outcome)


async def test_a_code_item_is_scored_by_its_tests_not_its_text(
    make_harness: MakeHarness, tmp_path: Path
) -> None:
    """fp16's answer does the sum in other words (its text fails the regex); int4's is one
    token off (its text passes the regex, its code fails `add(2, 3) == 5`). Scored by the
    item's tests as the profiler scores them: fp16 right, int4 wrong. Fails on ec20e3e, where
    the tests were ignored and the text decided (fp16 wrong, int4 right)."""
    path = tmp_path / "code.jsonl"
    path.write_text(json.dumps(CODE_ITEM) + "\n", encoding="utf-8")
    h = await make_harness(
        two_pair_table([FP16], [INT4]),
        routes={
            FP16: ok_json("    total=b+a\n    return (total)\n\nprint(add(1, 2))\n"),
            INT4: ok_json("    return a + b + 1\n"),
        },
        feedback_canary_items_per_minute=30.0,
        feedback_canary_items_file=str(path),
    )
    table = h.app[STORE].current
    assert table is not None
    assert await h.app[CANARY].send_due(table) == 2
    assert _code_metric(h, "fam@fp16", "right") == 1
    assert _code_metric(h, "fam@int4", "wrong") == 1
    (report,) = h.app[FEEDBACK].drain("dp", now=1.0)
    assert [(c.pair, c.n, c.right) for c in report.canary] == [
        ("fam@fp16", 1, 1),
        ("fam@int4", 1, 0),
    ]


def test_a_code_item_whose_tests_do_not_compile_is_named() -> None:
    bad = {**CODE_ITEM, "tests": "assert add(2, 3) == \n"}
    with pytest.raises(ValueError, match=r"canary item line 2: `tests` is not valid Python"):
        parse_items([json.dumps(CODE_ITEM), json.dumps(bad)])
    with pytest.raises(ValueError, match="line 1: `tests` must be non-empty Python source"):
        parse_items([json.dumps({**CODE_ITEM, "tests": ""})])


async def test_hostile_code_answers_are_wrong_and_the_data_plane_serves_meanwhile(
    make_harness: MakeHarness, tmp_path: Path
) -> None:
    """A pair's answer is untrusted code: int4's waits on a pipe the test holds, then forks
    in an endless loop; fp16's prints 200 MB. While int4's is held running, a client's
    request through the data plane answers (the tests run in child processes, never on the
    loop); once released, int4's is killed at its CPU limit and both count wrong."""
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    hostile = (
        f"    open({str(gate)!r}).read()\n    import os\n    while True:\n"
        "        try:\n            os.fork()\n        except Exception:\n            pass\n"
    )
    path = tmp_path / "code.jsonl"
    path.write_text(json.dumps(CODE_ITEM) + "\n", encoding="utf-8")
    h = await make_harness(
        two_pair_table([FP16], [INT4]),
        routes={FP16: ok_json("    print('x' * 200_000_000)\n"), INT4: ok_json(hostile)},
        feedback_canary_items_per_minute=30.0,
        feedback_canary_items_file=str(path),
    )
    h.app[CANARY].run_code_with(CodeTestRunner(CodeLimits(cpu_s=1, wall_s=120.0)))
    table = h.app[STORE].current
    assert table is not None
    sending = asyncio.create_task(h.app[CANARY].send_due(table))
    try:
        await eventually(lambda: _code_metric(h, "fam@fp16", "wrong") == 1, timeout_s=60.0)
        held = await _open_for_writing(gate)  # int4's child is reading the gate: still running
        body = json.dumps(
            {"model": "fam@int4", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8}
        )
        resp = await h.client.post("/v1/chat/completions", data=body)
        assert resp.status == 200
        assert (await resp.json())["choices"][0]["message"]["content"] == hostile
        assert not sending.done()  # int4's answer is still held at the gate
        os.close(held)  # released: it forks (refused) in an endless loop until its CPU limit
        assert await asyncio.wait_for(sending, timeout=60.0) == 2
    finally:
        sending.cancel()
        await asyncio.gather(sending, return_exceptions=True)
    assert _code_metric(h, "fam@int4", "wrong") == 1


async def _open_for_writing(fifo: Path) -> int:
    """The gate's write end, once a reader holds its read end (bounded by `eventually`)."""
    opened: list[int] = []

    def reader_came() -> bool:
        try:
            opened.append(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            return False
        return True

    await eventually(reader_came, timeout_s=60.0, what="the answer's child opened the gate")
    return opened[0]
