"""The one request object both doors create and the one ending they share
(`serving/lifecycle.py`): an error counts under its outcome label, a request counts once and
is freed once, and only a decided request holds anything to free."""

from __future__ import annotations

import gc
import weakref
from typing import Any, cast

import pytest

from data_plane.decision_step import Decidable
from data_plane.errors import InvalidRequest, Shed
from data_plane.serving.lifecycle import Finish, Request
from data_plane.serving.walk import Answer
from data_plane.telemetry.metrics import DataPlaneMetrics, RequestOutcome, Route


class Step:
    """Records the decided requests it was told are over (`DecisionStep.finished`)."""

    def __init__(self) -> None:
        self.finished_ones: list[Decidable] = []

    def finished(self, request: Decidable) -> None:
        self.finished_ones.append(request)


class Queue:
    def __init__(self) -> None:
        self.told = 0

    def finished(self) -> None:
        self.told += 1


def counted(metrics: DataPlaneMetrics) -> dict[str, float]:
    """`gearbox_requests_total` by outcome, non-zero samples only."""
    return {
        s.labels["outcome"]: s.value
        for family in metrics.registry.collect()
        for s in family.samples
        if s.name == "gearbox_requests_total" and s.value != 0
    }


def ending_parts() -> tuple[DataPlaneMetrics, Step, Queue, Finish]:
    metrics, step, queue = DataPlaneMetrics("test", "test"), Step(), Queue()
    return metrics, step, queue, Finish(metrics, step, queue, clock=lambda: 5.0)


@pytest.mark.parametrize(
    ("ending", "outcome"),
    [
        (Shed("full", retry_after_s=1.0), "shed"),
        (InvalidRequest("bad", param="max_tokens"), "invalid_request"),
        (RequestOutcome.STREAM_ERROR, "stream_error"),
    ],
)
def test_a_request_counts_once_under_its_outcome(
    ending: RequestOutcome | Shed | InvalidRequest, outcome: str
) -> None:
    metrics, _, _, finish = ending_parts()
    request = Request("r1", Route.CHAT_COMPLETIONS, 2.0)
    finish.count(request, ending)
    finish.finish(request, RequestOutcome.CANCELLED)  # counted already: not again
    assert counted(metrics) == {outcome: 1}
    assert request.outcome == RequestOutcome(outcome)


def test_a_decided_request_is_freed_once_and_an_undecided_one_never() -> None:
    _, step, queue, finish = ending_parts()
    undecided = Request("r1", Route.CHAT_COMPLETIONS, 0.0)
    finish.finish(undecided, RequestOutcome.OK)
    assert (step.finished_ones, queue.told) == ([], 0)
    decided = Request("r2", Route.CHAT_COMPLETIONS, 0.0)
    decided.is_decided = True  # as the decision step leaves it
    finish.free(decided)
    finish.finish(decided, RequestOutcome.OK)  # its answer's end after its stream's: once
    assert step.finished_ones == [decided]
    assert queue.told == 1


@pytest.mark.parametrize("field", ["decision", "table", "inbound", "tenant", "slot", "waited_s"])
def test_reading_the_decision_before_it_is_a_bug(field: str) -> None:
    """What the decision step writes onto a request (`decision_step.Decidable`) raises when
    read before it did; the request's own fields and a misspelt name are the usual errors."""
    request = Request("r1", Route.COMPLETIONS, 0.0)
    with pytest.raises(RuntimeError, match=f"'r1' is not decided yet \\(read '{field}'\\)"):
        getattr(request, field)
    assert request.id == "r1"
    misspelt = "decisoin"
    with pytest.raises(AttributeError):
        getattr(request, misspelt)


class Checks:
    """Records what the live checks were offered (`lifecycle.AnswerCheck`)."""

    def __init__(self) -> None:
        self.offered: list[tuple[Request, Answer]] = []

    def offer(self, request: Request, answer: Answer) -> None:
        self.offered.append((request, answer))


def test_finish_offers_a_served_answer_to_the_live_checks_once() -> None:
    """The door's finish offers the answer its request was served (once, however often the
    door ends it), and nothing for a request that got none (shed, invalid, failed)."""
    metrics, step, queue, checks = DataPlaneMetrics("t", "t"), Step(), Queue(), Checks()
    finish = Finish(metrics, step, queue, clock=lambda: 5.0, checks=checks)
    refused = Request("r1", Route.CHAT_COMPLETIONS, 0.0)
    finish.finish(refused, Shed("full", retry_after_s=1.0))
    served = Request("r2", Route.CHAT_COMPLETIONS, 0.0)
    served.is_decided = True
    answer = cast(Answer, object())
    served.answer = answer
    finish.finish(served, RequestOutcome.OK)
    finish.finish(served, RequestOutcome.OK)
    assert checks.offered == [(served, answer)]


class DoorRequest:
    """Stands for aiohttp's request, which the sink holds and which holds the Request
    (`middleware.REQUEST`)."""

    def __init__(self, request: Request) -> None:
        self.request = request


class Sink:
    def __init__(self, door: DoorRequest) -> None:
        self.door = door


def test_a_finished_request_lets_go_of_its_door_so_refcounting_frees_it() -> None:
    """Kept, the sink -> door request -> Request -> sink cycle leaves every request's objects
    to the cyclic collector (0.40-0.44 of the minimal proxy in the overhead gate, against
    0.48-0.49 freed: `Request.let_go`)."""
    *_, finish = ending_parts()
    request = Request("r", Route.CHAT_COMPLETIONS, 0.0)
    sink = Sink(DoorRequest(request))
    request.sends("/v1/chat/completions", cast(Any, sink), lambda _m: b"{}", lambda _c, _n: {})
    gone = weakref.ref(sink)
    gc.disable()
    try:
        finish.finish(request, RequestOutcome.OK)
        del sink, request
        assert gone() is None  # freed by refcounting, no collection ran
    finally:
        gc.enable()
