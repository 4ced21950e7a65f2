"""Statistics: quantiles with counts, TTFT/TPOT from timed stream chunks, Wilson intervals,
and the summary of one load level.

PURE: imports only the stdlib and `contracts`; times are float seconds handed in by the caller.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from contracts.profile_report import LatencySample, Quantiles

Z_95 = 1.959963984540054


@dataclass(frozen=True, slots=True)
class TimedStream:
    """What the client saw of one streamed completion, as readings of the running loop's clock
    (`profiler.engine.client.loop_time`).

    `token_times_s` holds the arrival time of every chunk that carried generated text; the
    usage counts are None when the engine sent no `usage` chunk.
    """

    started_s: float
    token_times_s: tuple[float, ...]
    finished_s: float
    prompt_chars: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class RequestTiming:
    """One finished request. `tpot_s` is None when it produced fewer than two tokens."""

    ttft_s: float
    e2e_s: float
    output_tokens: int
    tpot_s: float | None
    started_s: float
    finished_s: float
    prompt_chars: int = 0
    prompt_tokens: int | None = None


def extract_timing(stream: TimedStream) -> RequestTiming:
    """TTFT = first text chunk - start; e2e = end of stream - start;
    TPOT = (e2e - TTFT) / (tokens - 1), tokens from `usage` when present, else chunks.

    Raises ValueError for a stream without any text chunk (nothing to time).
    """
    if not stream.token_times_s:
        raise ValueError("the stream carried no generated text")
    ttft = stream.token_times_s[0] - stream.started_s
    e2e = max(stream.finished_s, stream.token_times_s[-1]) - stream.started_s
    tokens = stream.completion_tokens or len(stream.token_times_s)
    tpot = (e2e - ttft) / (tokens - 1) if tokens > 1 else None
    return RequestTiming(
        ttft_s=max(ttft, 0.0),
        e2e_s=max(e2e, 0.0),
        output_tokens=tokens,
        tpot_s=None if tpot is None else max(tpot, 0.0),
        started_s=stream.started_s,
        finished_s=stream.started_s + max(e2e, 0.0),
        prompt_chars=stream.prompt_chars,
        prompt_tokens=stream.prompt_tokens,
    )


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default); needs sorted input."""
    if not sorted_values:
        raise ValueError("quantile of no values")
    pos = q * (len(sorted_values) - 1)
    low = math.floor(pos)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (pos - low)


def summarize(values: Sequence[float]) -> Quantiles:
    """Mean, p50/p90/p95/p99 and the sample count of `values` (seconds). Needs >= 1 value."""
    if not values:
        raise ValueError("cannot summarize an empty sample")
    ordered = sorted(values)
    return Quantiles(
        n=len(ordered),
        mean=math.fsum(ordered) / len(ordered),
        p50=quantile(ordered, 0.5),
        p90=quantile(ordered, 0.9),
        p95=quantile(ordered, 0.95),
        p99=quantile(ordered, 0.99),
    )


def wilson_interval(successes: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval for a binomial proportion (95% by default), within [0, 1]."""
    if n < 1 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n and n >= 1, got {successes}/{n}")
    p = successes / n
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    # Clamp the float noise at the ends so ci_low <= p <= ci_high holds exactly.
    return max(0.0, min(centre - half, p)), min(1.0, max(centre + half, p))


def summarize_level(
    timings: Sequence[RequestTiming],
    errors: int,
    *,
    concurrency: int,
    input_tokens: int,
    open_loop_rate_rps: float | None = None,
) -> LatencySample | None:
    """One `LatencySample` from a level's measured requests (warm-up already excluded).

    Throughput uses the window from the first measured start to the last measured finish.
    `input_tokens` is the fallback when no usage reported prompt tokens. For an open-loop
    level, `concurrency` is replaced by the mean in-flight count (Little's law: rate x e2e).
    Returns None when no request finished: there is nothing to summarize, only errors.
    """
    if not timings:
        return None
    window_s = max(max(t.finished_s for t in timings) - min(t.started_s for t in timings), 1e-9)
    tokens = [t.output_tokens for t in timings]
    prompt = [t.prompt_tokens for t in timings if t.prompt_tokens]
    tpots = [t.tpot_s for t in timings if t.tpot_s is not None]
    e2e = summarize([t.e2e_s for t in timings])
    if open_loop_rate_rps is not None:
        concurrency = max(1, round(len(timings) / window_s * e2e.mean))
    return LatencySample(
        concurrency=concurrency,
        input_tokens=max(1, round(sum(prompt) / len(prompt))) if prompt else input_tokens,
        output_tokens=max(1, round(sum(tokens) / len(tokens))),
        requests=len(timings),
        errors=errors,
        duration_s=window_s,
        ttft_s=summarize([t.ttft_s for t in timings]),
        # A level whose requests all produced one token has no inter-token time: report 0.
        tpot_s=summarize(tpots) if tpots else summarize([0.0]),
        e2e_s=e2e,
        output_tokens_per_s=max(sum(tokens) / window_s, 1e-9),
        requests_per_s=len(timings) / window_s,
        open_loop_rate_rps=open_loop_rate_rps,
    )
