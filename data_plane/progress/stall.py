"""Lack of progress, judged per endpoint over time: the watch (the rule and why it is evidence
about the engine are the package's model, `data_plane.progress`; docs/reliability.md, "What a
breaker counts").

PURE: no clock, no I/O; `now` (monotonic seconds) is passed in. `progress.stall_guard` keeps the
one timer and ends the attempts this says to end.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field

from data_plane.progress.stillness import Reading, Verdict, still_verdict

Waiter = Hashable  # one waiting attempt's token (the guard's per-attempt object)
# Silence this close to the window is the window (a timer armed for the time computed from it
# must find it reached, whatever the rounding).
_EPSILON_S = 1e-6
# A window of 0 is this: at most one stall per endpoint this often (the timer never spins).
_MIN_WINDOW_S = 0.01


@dataclass(slots=True)
class _Endpoint:
    """One endpoint's waiting attempts (token -> (due, allowance, movable, first token's
    allowance)), its silence so far and the stalls counted in it."""

    waiting: dict[Waiter, tuple[float, float, bool, float]] = field(default_factory=dict)
    silent_s: float = 0.0  # overdue silence counted up to `counted_to`
    counted_to: float = 0.0
    min_due: float = float("inf")  # the earliest due time among `waiting`
    stalls: int = 0  # windows of this silence already counted (0: none yet)
    # The counters' episode, bumped by a byte (a reading from an earlier episode compares
    # with nothing); the time some attempt waited in it, up to `counted_to`; the reading the
    # stillness is measured from (the episode's first, or the last that differed from the one
    # before) and that time when it came; that time at the last reading.
    epoch: int = 0
    busy_s: float = 0.0
    first: Reading | None = None
    first_busy_s: float = 0.0
    read_busy_s: float = 0.0
    probing: bool = False  # a read of its counters is in flight
    read_at: float = float("-inf")  # when the last one came (at most one per floor window)
    moving: bool = False  # its last two readings in this episode differ: it works


class StallWatch:
    """Every endpoint's waiting attempts and overdue silence (see the module docstring)."""

    __slots__ = ("_endpoints", "_open_windows", "_stalls", "_window_s", "still_windows")

    def __init__(self, window_s: float, open_windows: int = 3, still_windows: int = 0) -> None:
        if window_s < 0:
            raise ValueError("window_s must be >= 0")
        if open_windows < 1 or still_windows < 0:
            raise ValueError("open_windows must be >= 1 and still_windows >= 0")
        self._window_s = max(window_s, _MIN_WINDOW_S)
        self._open_windows = open_windows
        # Windows between two readings of the counters (0: no readings; the guard sets it
        # when it has a probe).
        self.still_windows = still_windows
        self._endpoints: dict[str, _Endpoint] = {}
        self._stalls: list[tuple[str, bool]] = []

    def begin(
        self,
        endpoint_id: str,
        waiter: Waiter,
        now: float,
        allowance_s: float,
        movable: bool = True,
        first_token_s: float | None = None,
    ) -> float:
        """`waiter` waits on `endpoint_id` from `now`, overdue after `allowance_s`; a stall
        ends it only when `movable` (it has somewhere else to go). `first_token_s`: the
        engine's own pace for its first token (its prefill; None = `allowance_s`, a stream's),
        what it may take without moving a counter. Returns a time no later than the
        endpoint's next stall or reading if no byte comes (for the guard's timer)."""
        ep = self._endpoints.get(endpoint_id)
        if ep is None:
            ep = self._endpoints[endpoint_id] = _Endpoint(counted_to=now)
        self._advance(ep, now)
        due = now + allowance_s
        first_s = allowance_s if first_token_s is None else min(first_token_s, allowance_s)
        ep.waiting[waiter] = (due, allowance_s, movable, first_s)
        if due < ep.min_due:
            ep.min_due = due
        # A lower bound of `_check_at` (W is at least the floor) that costs no scan: a timer
        # armed for it that finds nothing to do looks again later.
        left_s = (ep.stalls + 1) * self._window_s - ep.silent_s
        start = now if ep.min_due < now else ep.min_due
        at = start + left_s if left_s > _EPSILON_S else start
        if self.still_windows and not ep.probing:  # the next reading of the counters
            return min(at, self._probe_at(ep, now))
        return at

    def end(self, endpoint_id: str, waiter: Waiter, now: float) -> None:
        """`waiter` stopped waiting (its first progress, a failure, the client's limit)."""
        ep = self._endpoints.get(endpoint_id)
        if ep is None or waiter not in ep.waiting:
            return
        self._advance(ep, now)
        due = ep.waiting.pop(waiter)[0]
        if not ep.waiting:
            ep.min_due = float("inf")
        elif due <= ep.min_due:
            ep.min_due = min(ep.waiting.values())[0]  # tuples order by due first (C loop)

    def progress(self, endpoint_id: str, now: float) -> None:
        """The endpoint sent a byte of an answer at `now`: its silence starts again."""
        ep = self._endpoints.get(endpoint_id)
        if ep is not None:
            ep.silent_s = 0.0
            ep.stalls = 0
            ep.epoch += 1
            ep.busy_s = 0.0
            ep.first = None
            ep.moving = False
            if now > ep.counted_to:
                ep.counted_to = now

    def silence_s(self, endpoint_id: str, now: float) -> float:
        """The endpoint's overdue silence at `now` (for tests and the docs' figures)."""
        ep = self._endpoints.get(endpoint_id)
        if ep is None:
            return 0.0
        self._advance(ep, now)
        return ep.silent_s

    def window_s(self, endpoint_id: str, now: float) -> float:
        """W for the endpoint at `now`: the floor, the longest overdue allowance, or the
        longest first-token allowance of an attempt waiting there."""
        ep = self._endpoints.get(endpoint_id)
        return self._window_s if ep is None else self._window(ep, now)

    def stalled(self, now: float) -> list[tuple[str, Waiter]]:
        """The attempts to end now as lack of progress (overdue and movable, at an endpoint
        whose silence just reached a further window); they no longer wait. Each such stall is
        kept once for `take_stalls`."""
        ended: list[tuple[str, Waiter]] = []
        for endpoint_id, ep in self._endpoints.items():
            if not ep.waiting or ep.min_due > now:
                continue
            self._advance(ep, now)
            window = self._window(ep, now)
            windows = int((ep.silent_s + _EPSILON_S) / window)
            if windows <= ep.stalls:
                continue
            ep.stalls = windows
            # Counters that moved say it works, for someone: not hung, nothing to count;
            # its overdue attempts with somewhere else to go still move on.
            hung = windows >= self._open_windows and not ep.moving
            if not ep.moving:
                self._stalls.append((endpoint_id, hung))
            ended += self._end_overdue(endpoint_id, ep, now, hung)
        return ended

    def probes_due(self, now: float) -> list[tuple[str, int]]:
        """The endpoints whose counters to read now, each with its episode for `read`: some
        attempt there is overdue, none of its reads is in flight, and it has no reading yet
        in this episode or its last came a window of waiting ago. They count as probing."""
        due: list[tuple[str, int]] = []
        if not self.still_windows:
            return due
        for endpoint_id, ep in self._endpoints.items():
            if not ep.waiting:
                continue
            self._advance(ep, now)
            if self._probe_at(ep, now) <= now:
                ep.probing = True
                due.append((endpoint_id, ep.epoch))
        return due

    def read(
        self, endpoint_id: str, epoch: int, now: float, reading: Reading
    ) -> list[Waiter] | None:
        """The counters read for `endpoint_id` in `epoch` (`probes_due`), arrived at `now`,
        compared with the episode's previous reading (`still_verdict`). A hang: the
        endpoint's overdue attempts, which no longer wait (open its breaker, end them);
        None: no hang, and this reading is the next one's baseline. A reading from an
        earlier episode (a byte came meanwhile) is dropped (None)."""
        ep = self._endpoints.get(endpoint_id)
        if ep is None:
            return None
        ep.probing = False
        ep.read_at = now
        if epoch != ep.epoch:
            return None
        self._advance(ep, now)
        ep.read_busy_s = ep.busy_s
        base = ep.first
        verdict = Verdict.UNKNOWN if base is None else still_verdict(base, reading)
        ep.moving = verdict is Verdict.PROGRESS
        if verdict is not Verdict.HUNG:
            ep.first, ep.first_busy_s = reading, ep.busy_s  # stillness counts from here
            return None
        if ep.busy_s - ep.first_busy_s < self.still_windows * self._span(ep) - _EPSILON_S:
            return None  # still, not yet for the whole span: the base stays
        ep.first = None  # the next episode starts with a fresh reading
        return [waiter for _, waiter in self._end_overdue(endpoint_id, ep, now, True)]

    def take_stalls(self) -> list[tuple[str, bool]]:
        """The stalls `stalled` found since the last call, one per endpoint and window:
        (endpoint, hung), hung when its silence reached `open_windows` x W (open the breaker
        now), else one failure for the breaker to count."""
        taken, self._stalls = self._stalls, []
        return taken

    def next_check(self, now: float) -> float | None:
        """The soonest time `stalled` could find a stall if no byte arrives (None: no
        attempt waits anywhere)."""
        soonest = None
        for ep in self._endpoints.values():
            if ep.waiting:
                self._advance(ep, now)
                at = min(self._check_at(ep, now), self._probe_at(ep, now))
                soonest = at if soonest is None else min(soonest, at)
        return soonest

    def retain(self, endpoint_ids: Iterable[str]) -> None:
        """Forget endpoints no longer in the table, unless attempts still wait on them."""
        keep = set(endpoint_ids)
        for endpoint_id in [e for e, ep in self._endpoints.items() if e not in keep]:
            if not self._endpoints[endpoint_id].waiting:
                del self._endpoints[endpoint_id]

    def _end_overdue(
        self, endpoint_id: str, ep: _Endpoint, now: float, hung: bool
    ) -> list[tuple[str, Waiter]]:
        """End the endpoint's overdue attempts that have somewhere else to go, or all of them
        on a hang: waiting longer on a hung engine only holds the client (until its deadline,
        300 s without a budget)."""
        ends = [
            w for w, (due, _, movable, _) in ep.waiting.items() if (movable or hung) and due <= now
        ]
        for waiter in ends:
            del ep.waiting[waiter]
        ep.min_due = min((w[0] for w in ep.waiting.values()), default=float("inf"))
        return [(endpoint_id, waiter) for waiter in ends]

    def _probe_at(self, ep: _Endpoint, now: float) -> float:
        """When to read the endpoint's counters next, if the waiting set stays as it is (inf:
        not until it changes): once an attempt is overdue, a floor window after the last read
        at the soonest (an endpoint whose bytes keep starting episodes over is not read on
        each), and after the last reading of this episode, once our attempts waited there one
        more window of the span (`_span`; the last read exactly when the stillness reaches
        `still_windows` of them). Only waiting time counts: an engine without our work may be
        idle; and the longest first-token allowance, overdue or not, is the work it owes us
        that may move no counter until done (a prefill, which vLLM counts at its end; after
        it, decoding moves a counter each step)."""
        if not self.still_windows or ep.probing or not ep.waiting:
            return float("inf")
        if ep.first is None:  # at most one read per floor window, however often bytes come
            return max(ep.min_due, ep.read_at + self._window_s)
        span_s = self._span(ep)
        last_s = ep.first_busy_s + self.still_windows * span_s  # the stillness's whole span
        left_s = min(ep.read_busy_s + span_s, last_s) - ep.busy_s
        return max(ep.min_due, now + max(left_s, 0.0))

    def _span(self, ep: _Endpoint) -> float:
        """One window of the counters' span: the floor, or the longest first-token allowance
        among the attempts waiting there, if longer."""
        return max(self._window_s, max((w[3] for w in ep.waiting.values()), default=0.0))

    def _window(self, ep: _Endpoint, now: float) -> float:
        """W: the floor, the longest allowance among the overdue attempts, or the longest
        first-token allowance among all waiting (a prefill, which sends no byte to anyone
        and moves no counter until done, `progress.stillness`), if longer."""
        owed = 0.0
        for due, allowance, _, first_s in ep.waiting.values():
            owed = max(owed, allowance if due <= now else first_s)
        return max(self._window_s, owed)

    def _check_at(self, ep: _Endpoint, now: float) -> float:
        """When the endpoint's silence (counted up to `now`) reaches its next window, if the
        waiting set stays as it is (W as known now; a wider one later only makes the guard
        look again)."""
        left_s = (ep.stalls + 1) * self._window(ep, now) - ep.silent_s
        return max(now, ep.min_due) + max(left_s, 0.0)

    @staticmethod
    def _advance(ep: _Endpoint, now: float) -> None:
        """Count the silence and the waiting time since `counted_to`: the waiting set was
        constant meanwhile, so some attempt was overdue from max(counted_to, earliest due) on."""
        counted_to = ep.counted_to
        if now <= counted_to:
            return
        if ep.waiting:
            ep.busy_s += now - counted_to
        start = ep.min_due if ep.min_due > counted_to else counted_to
        if now > start:
            ep.silent_s += now - start
        ep.counted_to = now
