"""One request's walk through its fallback chain, and each answer it gets with what it cost.

The proxy (`proxy.py`) moves a `RequestWalk` along; delivery (`delivery.py`) reads it to send
the answer or the error and to account it. Neither passes the request's parts to the other.
What the request is, how it is sent and where its walk stands (the chain it walks, its one
attempt counter, the last failure and candidate) is its `lifecycle.Request`, which the
attempt runner, handed the request and one `Attempt` at a time, sees too.
"""

from __future__ import annotations

from dataclasses import dataclass

from data_plane.domain import Candidate, CompiledTable
from data_plane.serving.attempt import ClientSink, Served
from data_plane.serving.deadlines import Deadline
from data_plane.serving.lifecycle import Request
from data_plane.serving.usage import Usage, cost_usd, find_usage


@dataclass(slots=True)
class RequestWalk:
    """What one request's attempts share beyond the request itself (its deadline); where the
    walk stands, and the chain it walks (`Request.walked`), is its `request`."""

    request: Request  # the one the door created and the decision step filled in
    deadline: Deadline  # the request's timeout (moved when best-effort relaxes)
    deadline_at: float  # the same moment on the injected clock

    @property
    def table(self) -> CompiledTable:
        """The table it was decided on, read once; every retry uses it."""
        return self.request.table

    @property
    def sink(self) -> ClientSink:
        """Where the answer goes: the request's."""
        return self.request.sink

    def answered(self) -> None:
        """A whole answer is in hand: writing it to the client is not held to the budget (a
        deadline firing mid-write would leave a half-sent answer and then an error)."""
        if not self.deadline.expired():
            self.deadline.reschedule(None)

    def extend(self, extra_s: float) -> None:
        when = self.deadline.when()
        if extra_s > 0 and when is not None:
            self.deadline.reschedule(when + extra_s)
            self.deadline_at += extra_s

    def remaining_s(self, now: float) -> float:
        return self.deadline_at - now


class Answer:
    """One served answer of `cand`'s pair: its usage (the answer's `usage`, else the
    decision's token estimates) and its cost, worked out once, when first asked for (after
    the answer went out, unless the quality guard needs it before)."""

    __slots__ = ("_found", "_usage", "cand", "served")

    def __init__(self, cand: Candidate, served: Served) -> None:
        self.cand = cand
        self.served = served
        self._usage: Usage | None = None
        self._found: Usage | None = None

    @property
    def usage(self) -> Usage:
        if self._usage is None:
            cand = self.cand
            served = self.served  # a non-streamed answer's usage was read in the attempt
            self._found = served.usage if served.usage is not None else find_usage(served.body)
            self._usage = self._found or Usage(cand.input_tokens, cand.output_tokens)
        return self._usage

    @property
    def engine_usage(self) -> Usage | None:
        """The usage the engine reported in its answer; None when it reported none."""
        _ = self.usage
        return self._found

    @property
    def cost_usd(self) -> float:
        return cost_usd(self.cand.pair, self.usage)
