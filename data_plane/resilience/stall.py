"""Lack of progress, judged per endpoint over time (docs/reliability.md, "What a breaker counts").

PURE: no clock, no I/O; `now` (monotonic seconds) is passed in. `serving.stall_guard` keeps the
one timer and ends the attempts this says to end.

The model. An attempt *waits* on its endpoint from when it is sent until its first progress:
a stream's first chunk, or a non-streamed answer's whole body. Each waiting attempt has an
*allowance*, the engine's own pace for its work (`EnginePace.allowance_s`: its profiled time for
the first byte, or for the longest answer the request allows, at its load, x the slowdown the
endpoint has lately shown, x a margin); past it the attempt is *overdue*. The endpoint's
*silence* is the time since its last byte on ANY attempt (a first chunk, a later chunk, a whole
answer) during which at least one of its waiting attempts was overdue. The window W = max(
`stall_window_s`, the longest allowance among its overdue attempts). Each time the silence
reaches a further multiple of W (W, 2W, 3W, ...) the endpoint *stalls*: that is ONE
observation, however many attempts wait (they all wait on the same silence), so it counts once
against the endpoint's breaker (`take_stalls`: one failure), and from `open_windows` x W on it
opens the breaker at once (a silence that long is a hang, not a slow engine); at each stall its
overdue attempts that have somewhere else to go (`begin(..., movable=True)`: the proxy's next
candidate fits in the client's deadline) are ended as lack of progress; the others keep waiting
until the client's own limit, so an engine that is the request's only choice answers late
rather than not at all, unless the silence reaches the hang (`open_windows` x W): then every
overdue attempt ends, since waiting on a hung engine only holds the client until its deadline.
A byte on any attempt ends the episode (silence and count start again).

Why this is evidence about the engine and not about a request or a client:
- a byte on any attempt resets the silence: an endpoint working on other requests (its queue,
  other clients' long answers, cores shared with other engines) is slow for this one, a
  latency fact (load, pace, feedback), never lack of progress;
- silence counts only past an attempt's allowance, so a client's budget that ends attempts
  early (a TTFT budget, a request deadline) adds nothing, whoever sends it and however often;
- silence adds up across attempts (it resets only with a byte), so a hung engine behind
  clients whose deadlines end each attempt before W is still caught;
- W scales with the work owed (the longest overdue allowance), so a uniformly slower engine is
  tolerated up to about 2 x factor x its profile before its pace is even known, and the pace
  it then shows (`EnginePace`) widens the allowances further.
What else could explain a stall: an engine that gives no byte to anyone for that long while
working (a batch of long non-streamed answers on an engine that cannot fit one more request,
a preemption storm), or bytes we did not see (another replica's attempts). The window's floor
and the allowance of the work owed are what such an engine gets; a hung or dead-but-listening
engine gives nothing: its breaker opens after `open_windows` x W of silence (allowance + 3W at
the defaults), or after K stalls in a row with no answer between them.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field

Waiter = Hashable  # one waiting attempt's token (the guard's per-attempt object)
# Silence this close to the window is the window (a timer armed for the time computed from it
# must find it reached, whatever the rounding).
_EPSILON_S = 1e-6
# A window of 0 is this: at most one stall per endpoint this often (the timer never spins).
_MIN_WINDOW_S = 0.01


@dataclass(slots=True)
class _Endpoint:
    """One endpoint's waiting attempts (token -> (due, allowance, movable)), its silence so
    far and the stalls counted in it."""

    waiting: dict[Waiter, tuple[float, float, bool]] = field(default_factory=dict)
    silent_s: float = 0.0  # overdue silence counted up to `counted_to`
    counted_to: float = 0.0
    min_due: float = float("inf")  # the earliest due time among `waiting`
    stalls: int = 0  # windows of this silence already counted (0: none yet)


class StallWatch:
    """Every endpoint's waiting attempts and overdue silence (see the module docstring)."""

    __slots__ = ("_endpoints", "_open_windows", "_stalls", "_window_s")

    def __init__(self, window_s: float, open_windows: int = 3) -> None:
        if window_s < 0:
            raise ValueError("window_s must be >= 0")
        if open_windows < 1:
            raise ValueError("open_windows must be >= 1")
        self._window_s = max(window_s, _MIN_WINDOW_S)
        self._open_windows = open_windows
        self._endpoints: dict[str, _Endpoint] = {}
        self._stalls: list[tuple[str, bool]] = []

    def begin(
        self,
        endpoint_id: str,
        waiter: Waiter,
        now: float,
        allowance_s: float,
        movable: bool = True,
    ) -> float:
        """`waiter` waits on `endpoint_id` from `now`, overdue after `allowance_s`; a stall
        ends it only when `movable` (it has somewhere else to go). Returns a time no later than
        the endpoint's next stall if no byte comes (for the guard's timer)."""
        ep = self._endpoints.get(endpoint_id)
        if ep is None:
            ep = self._endpoints[endpoint_id] = _Endpoint(counted_to=now)
        self._advance(ep, now)
        due = now + allowance_s
        ep.waiting[waiter] = (due, allowance_s, movable)
        if due < ep.min_due:
            ep.min_due = due
        # A lower bound of `_check_at` (W is at least the floor) that costs no scan: a timer
        # armed for it that finds nothing to do looks again later.
        left_s = (ep.stalls + 1) * self._window_s - ep.silent_s
        start = now if ep.min_due < now else ep.min_due
        return start + left_s if left_s > _EPSILON_S else start

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
            ep.min_due = min(w[0] for w in ep.waiting.values())

    def progress(self, endpoint_id: str, now: float) -> None:
        """The endpoint sent a byte of an answer at `now`: its silence starts again."""
        ep = self._endpoints.get(endpoint_id)
        if ep is not None:
            ep.silent_s = 0.0
            ep.stalls = 0
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
        """W for the endpoint at `now`: the floor, or the longest overdue allowance."""
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
            hung = windows >= self._open_windows
            self._stalls.append((endpoint_id, hung))
            # A hang ends every overdue attempt: past `open_windows` x W of silence waiting
            # longer only holds the client (until its deadline, 300 s without a budget).
            ends = [
                w for w, (due, _, movable) in ep.waiting.items() if (movable or hung) and due <= now
            ]
            for waiter in ends:
                del ep.waiting[waiter]
                ended.append((endpoint_id, waiter))
            ep.min_due = min((w[0] for w in ep.waiting.values()), default=float("inf"))
        return ended

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
                at = self._check_at(ep, now)
                soonest = at if soonest is None else min(soonest, at)
        return soonest

    def retain(self, endpoint_ids: Iterable[str]) -> None:
        """Forget endpoints no longer in the table, unless attempts still wait on them."""
        keep = set(endpoint_ids)
        for endpoint_id in [e for e, ep in self._endpoints.items() if e not in keep]:
            if not self._endpoints[endpoint_id].waiting:
                del self._endpoints[endpoint_id]

    def _window(self, ep: _Endpoint, now: float) -> float:
        owed = [allowance for due, allowance, _ in ep.waiting.values() if due <= now]
        return max(self._window_s, max(owed, default=0.0))

    def _check_at(self, ep: _Endpoint, now: float) -> float:
        """When the endpoint's silence (counted up to `now`) reaches its next window, if the
        waiting set stays as it is (W as known now; a wider one later only makes the guard
        look again)."""
        left_s = (ep.stalls + 1) * self._window(ep, now) - ep.silent_s
        return max(now, ep.min_due) + max(left_s, 0.0)

    @staticmethod
    def _advance(ep: _Endpoint, now: float) -> None:
        """Count the silence since `counted_to`: the waiting set was constant meanwhile, so
        some attempt was overdue from max(counted_to, earliest due) on."""
        counted_to = ep.counted_to
        if now <= counted_to:
            return
        start = ep.min_due if ep.min_due > counted_to else counted_to
        if now > start:
            ep.silent_s += now - start
        ep.counted_to = now
