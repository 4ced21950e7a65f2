"""The engine's own pace: how long its work should take, and how much slower it lately is.

PURE: no clock, no I/O. Built from the engine's own behaviour, never from our prediction for a
request: the pair's profiled time for the work at the endpoint's load now (`engine_time_s`),
times how much slower than that profile the endpoint has lately answered (`EnginePace`), times
a margin (`factor`).

Before an attempt's first progress this gives its *allowance* (`EnginePace.allowance_s`): for
its first byte (streams) or for the longest answer the request allows (non-streams:
`max_tokens`, else the context left after the prompt, `output_cap`). Past it the attempt is
overdue, which is not yet a fault: whether the engine is making progress is judged per endpoint
over time (`progress.stall`: silence on every attempt, counted only while some attempt is
overdue, for a window). An overdue attempt at an endpoint still sending bytes elsewhere is a
latency fact (load, pace, feedback), never an ejection.

After the first bytes of its answer (streamed or not) the engine's progress is its bytes:
`gap_s` is how long it may go silent, its profiled time per output token at the load the
attempt started at, times the same slowdown and margin, plus `slack_s`, never under a floor.
The observation is "no byte on this answer for many times this engine's time per token"; what
else could explain it: a batch stalled by other requests' prefills or a preemption under memory
pressure (the floor covers those), or a client slow to read (never counted: the silence is
timed only while we wait for the engine, not while we write to the client,
`UpstreamRequest.gap_s`).
"""

from __future__ import annotations

from collections.abc import Iterable

from data_plane.domain import CompiledPair, load_terms
from data_plane.settings import ProgressConfig

PACE_RECOVERY = 0.1  # share of the gap to a faster answer closed per answer


def engine_time_s(pair: CompiledPair, input_tokens: int, output_tokens: int, load: float) -> float:
    """The pair's profiled time for this much work at `load` (requests at the endpoint, this
    one included): TTFT(input, load) + output x TPOT(load)."""
    ttft_load_s, tpot_load_s = load_terms(pair, load, input_tokens)
    ttft_s = pair.ttft_base_s + pair.ttft_per_input_token_s * input_tokens + ttft_load_s
    return ttft_s + output_tokens * (pair.tpot_base_s + tpot_load_s)


def engine_tpot_s(pair: CompiledPair, load: float) -> float:
    """The pair's profiled time per output token at `load`."""
    return pair.tpot_base_s + pair.tpot_per_load_s * load


def output_cap(pair: CompiledPair, input_tokens: int, max_tokens: int | None) -> int:
    """The most tokens the answer can have: `max_tokens` when the client set it, else what the
    context leaves after the prompt (a non-streamed answer without `max_tokens` may run that
    long; the category's typical length is a routing estimate, not a bound)."""
    left = max(0, pair.context_length - input_tokens)
    return left if max_tokens is None else min(max_tokens, left)


class EnginePace:
    """Per endpoint, how much slower than its profile it has lately answered (>= 1).

    One answer slower than the current ratio raises it at once (the engine's pace now is what
    its next limit must allow for); faster answers bring it back by `recovery` of the gap
    each. Only ever loosens limits: what a client's odd requests can do to it is delay the
    ejection of an engine that then hangs, by at most `max_pace_ratio`.
    """

    __slots__ = ("_config", "_ratio", "_recovery")

    def __init__(self, config: ProgressConfig, recovery: float = PACE_RECOVERY) -> None:
        if not 0 < recovery <= 1:
            raise ValueError("recovery must be in (0, 1]")
        self._config = config
        self._recovery = recovery
        self._ratio: dict[str, float] = {}

    @property
    def config(self) -> ProgressConfig:
        return self._config

    def ratio(self, endpoint_id: str) -> float:
        return self._ratio.get(endpoint_id, 1.0)

    def observe(self, endpoint_id: str, took_s: float, profile_s: float) -> None:
        """An attempt made progress after `took_s` where the profile says `profile_s`."""
        if profile_s <= 0:
            return
        cfg = self._config
        sample = min(max(took_s / profile_s, 1.0), cfg.max_pace_ratio)
        old = self._ratio.get(endpoint_id, 1.0)
        recovered = old + (sample - old) * self._recovery
        self._ratio[endpoint_id] = sample if sample >= old else recovered

    def allowance_s(self, endpoint_id: str, profile_s: float) -> float | None:
        """How long the engine may take for work the profile puts at `profile_s` before an
        attempt waiting on it is overdue: that x its observed slowdown x `factor` (None:
        `factor` 0, no engine limit). Overdue is not a fault: `progress.stall` counts the
        endpoint's silence while attempts are overdue, and only that silence ends them."""
        cfg = self._config
        if cfg.factor <= 0:
            return None
        return profile_s * self.ratio(endpoint_id) * cfg.factor

    def gap_s(self, endpoint_id: str, tpot_s: float) -> float | None:
        """How long the engine may go without a byte mid-answer, for a profiled time per
        token of `tpot_s`: that x its observed slowdown x the margin, at least `gap_floor_s`
        (None: no engine limit, `factor` 0)."""
        cfg = self._config
        if cfg.factor <= 0:
            return None
        paced = tpot_s * self.ratio(endpoint_id) * cfg.factor + cfg.slack_s
        return max(cfg.gap_floor_s, paced)

    def retain(self, endpoint_ids: Iterable[str]) -> None:
        """Forget endpoints no longer in the table."""
        keep = set(endpoint_ids)
        for endpoint_id in [e for e in self._ratio if e not in keep]:
            del self._ratio[endpoint_id]
