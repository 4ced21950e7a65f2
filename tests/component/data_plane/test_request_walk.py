"""The walk of one request through the data plane's folders (docs/data_plane.md, "What
happens to a request"): the body and the budget headers are read once, by `request/`, into one
object the handler passes along; after that `request/` is entered only to make the body an
engine receives. Traced with `sys.setprofile` over one request on a warm app."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import orjson

import data_plane
from data_plane.serving.attempt import Attempt
from data_plane.serving.lifecycle import Request
from data_plane.telemetry.metrics import RequestOutcome
from data_plane.upstream.port import UpstreamRequest
from tests.component.data_plane.conftest import CHAT_BODY, Harness, MakeHarness
from tests.component.data_plane.fakes import (
    FakeResponse,
    make_table,
    ok_json,
    pair_entry,
    two_pair_table,
)

FP16, INT4 = "http://fp16-a", "http://int4-a"
ROOT = Path(data_plane.__file__).parent
JSON_DECODE = Path(sys.modules["json"].__file__ or "").parent


def _folder(frame: FrameType | None) -> str | None:
    """The data_plane sub-package (or root module) a frame runs in; None outside data_plane."""
    if frame is None:
        return None
    path = Path(frame.f_code.co_filename)
    if not path.is_relative_to(ROOT):
        return None
    return path.relative_to(ROOT).parts[0]


class Walk:
    """The data_plane folders entered, in order (a run in one folder counts once), and the
    folders that decoded JSON (the client's body, and on routed requests the engine's answer)."""

    def __init__(self) -> None:
        self.stops: list[str] = []
        self.decoders: set[str | None] = set()

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "c_call" and arg is orjson.loads:
            self.decoders.add(_folder(frame))
        if event != "call":
            return
        if Path(frame.f_code.co_filename).parent == JSON_DECODE and frame.f_code.co_name in (
            "loads",
            "decode",
        ):
            self.decoders.add(_folder(frame.f_back))
        folder = _folder(frame)
        if folder is not None and (not self.stops or self.stops[-1] != folder):
            self.stops.append(folder)

    def visits(self, folder: str) -> int:
        return self.stops.count(folder)


async def _traced(h: Harness, path: str, body: dict[str, Any]) -> Walk:
    """The walk of one POST of `body` to `path`, after one untraced warm-up request (first-use
    caches are not part of the walk)."""

    async def send() -> int:
        resp = await h.client.post(path, json=body)
        await resp.read()
        return resp.status

    await send()
    walk = Walk()
    sys.setprofile(walk)
    try:
        status = await send()
    finally:
        sys.setprofile(None)
    assert status == 200
    return walk


async def test_a_routed_request_reads_its_body_once(make_harness: MakeHarness) -> None:
    h = await make_harness(two_pair_table([FP16], [INT4]), routes={INT4: ok_json()})
    walk = await _traced(h, "/v1/chat/completions", CHAT_BODY)
    # Once to read the request (body, budget, category), once to rewrite `model` for the
    # engine; the handler no longer goes back for the category or the rewrite.
    assert walk.visits("request") == 2, walk.stops


async def test_route_reads_its_body_once_and_only_in_request(make_harness: MakeHarness) -> None:
    h = await make_harness(two_pair_table([FP16], [INT4]), routes={INT4: ok_json()})
    walk = await _traced(h, "/v1/route", {"model": "auto", "prompt": "Say hello.", "max_tokens": 8})
    assert walk.visits("request") == 1, walk.stops
    assert walk.decoders == {"request"}  # the handler does not decode it to pick its kind


class Built:
    """How many fallback candidates one request builds (`decision.chain.candidate_of`)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_name == "candidate_of" and _folder(frame):
            self.count += 1


async def test_an_answered_first_attempt_builds_only_the_candidates_it_reads(
    make_harness: MakeHarness,
) -> None:
    """Four feasible pairs, the cheapest answers: the walk builds the choice and the next
    candidate (the first attempt's handover reads it), not the whole chain (it built all
    four before the attempts were read lazily)."""
    urls = [f"http://pair-{i}" for i in range(4)]
    entries = [
        pair_entry(f"fam{i}", "fp16", urls=[url], usd_per_mtok=1.0 + i)
        for i, url in enumerate(urls)
    ]
    h = await make_harness(make_table(entries), routes={urls[0]: ok_json()})

    async def send() -> int:
        resp = await h.client.post("/v1/chat/completions", json=CHAT_BODY)
        await resp.read()
        return resp.status

    assert await send() == 200
    built = Built()
    sys.setprofile(built)
    try:
        status = await send()
    finally:
        sys.setprofile(None)
    assert status == 200
    assert built.count == 2


class Held:
    """The `lifecycle.Request` each step of one request holds, read off the frames of the
    steps it passes (`sys.setprofile`): created by the door, filled in by the decision step,
    sent to the engine, delivered, finished, and offered to the live checks by its finish."""

    def __init__(self) -> None:
        self.created: list[Request] = []
        self.decided: list[object] = []  # the decision the step wrote onto the request
        self.seen: list[tuple[str, Request, object]] = []  # (step, request, what it held)
        # A coroutine's resumptions are "call" events too: the frames entered, kept (an id
        # alone could be a freed frame's).
        self._entered: dict[int, FrameType] = {}

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if _folder(frame) is None:
            return
        name, f = frame.f_code.co_qualname, frame.f_locals
        if event == "return":
            if name == "Request.__init__":
                self.created.append(f["self"])
            elif name == "DecisionStep.decide":
                self.decided.append(f["request"].decision)
            return
        if event != "call" or id(frame) in self._entered:
            return
        self._entered[id(frame)] = frame
        step = STEPS.get(name)
        if step is not None:
            self.seen.append((step[0], *step[1](f)))


# The steps one request passes, by function: (step, what it reads off the frame's locals:
# the request it holds, and what it holds of it).
STEPS: dict[str, tuple[str, Callable[[dict[str, Any]], tuple[Request, object]]]] = {
    "DecisionStep.decide": ("decide", lambda f: (f["request"], None)),
    "AttemptRunner.run": ("attempt", lambda f: (f["request"], f["attempt"])),
    "Delivery.deliver": ("deliver", lambda f: (f["walk"].request, f["walk"].request.decision)),
    "Finish.finish": ("finish", lambda f: (f["request"], f["ending"])),
    "AccuracyChecker.offer": ("offer", lambda f: (f["request"], f["answer"])),
}


async def test_one_request_object_goes_from_the_door_to_the_engine_and_back(
    make_harness: MakeHarness,
) -> None:
    """One `Request` per client request (`serving/lifecycle.py`): the one the middleware
    creates is the one the decision step fills in (no second container: its decision is
    written onto it), the one the attempt runner sends
    (its id is the engine's X-Request-Id), the one delivery accounts on the same decision,
    and the one the door finishes, counted once as `ok`, whose finish offers its delivered
    answer to the live checks (`lifecycle.Finish`, not the proxy)."""
    h = await make_harness(two_pair_table([FP16], [INT4]), routes={INT4: ok_json()})
    assert (await h.client.post("/v1/chat/completions", json=CHAT_BODY)).status == 200
    held = Held()
    sys.setprofile(held)
    try:
        resp = await h.client.post("/v1/chat/completions", json=CHAT_BODY)
        await resp.read()
    finally:
        sys.setprofile(None)
    assert resp.status == 200
    [request] = held.created
    [decision] = held.decided
    order = ["decide", "attempt", "deliver", "finish", "offer"]
    assert [step for step, _, _ in held.seen] == order
    assert all(seen is request for _, seen, _ in held.seen)
    steps = {step: what for step, _, what in held.seen}
    assert steps["deliver"] is decision
    assert request.decision is decision
    assert isinstance(steps["attempt"], Attempt)
    assert steps["finish"] is RequestOutcome.OK
    assert steps["offer"] is request.answer
    assert request.answer is not None
    assert request.answer.served.status == 200
    assert (request.counted, request.ended, request.attempts) == (True, True, 1)
    assert h.upstream.requests[-1].headers["X-Request-Id"] == request.id
    assert resp.headers["X-Request-Id"] == request.id


async def test_the_request_runs_on_the_apps_clock_from_its_door_to_its_end(
    make_harness: MakeHarness,
) -> None:
    """One start time, on the app's injected clock (`AppDeps.clock`): the middleware reads
    it when it creates the `Request`, and the request's duration
    (`gearbox_request_duration_seconds`) and its pair's latency run from it. An engine that
    takes 2.5 s of that clock makes both exactly 2.5 s (before, the door timed the request
    on its own clock and the fake clock's 2.5 s did not show in its duration)."""
    routes = {INT4: ok_json()}
    h = await make_harness(two_pair_table([FP16], [INT4]), routes=routes)

    def slow(request: UpstreamRequest) -> FakeResponse:
        h.clock.advance(2.5)
        return ok_json()(request)

    routes[INT4] = slow
    resp = await h.client.post("/v1/chat/completions", json=CHAT_BODY)
    assert resp.status == 200
    labels = {"route": "chat_completions", "outcome": "ok"}
    assert h.metric("gearbox_request_duration_seconds_sum", **labels) == 2.5
    assert h.metric("gearbox_pair_latency_seconds_sum", pair="fam@int4") == 2.5
