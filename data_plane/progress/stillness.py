"""Hang or progress, read from the engine's own token counters (docs/reliability.md, "What a
breaker counts"): the verdict from two readings of an endpoint's `/metrics`.

PURE: no clock, no I/O. `progress.engine_probe` takes the readings, `progress.stall` decides
when (only while our attempts at the endpoint wait overdue, never on the request path) and
acts on a hang.

An engine's counters `vllm:prompt_tokens_total` and `vllm:generation_tokens_total` (the pair's
served model's series) move whenever it finishes a prefill or emits a token, for anyone. Two
readings a span apart with the same counters say it did neither in between: with our attempts
waiting there throughout, it had work and did none. That is what a hung engine shows (a
frozen engine loop, a dead device behind a live HTTP server), and two probes a span apart
that get no answer at all are what a frozen or dead process shows (one alone is not enough:
a process starved of cores may be slow to serve a large `/metrics` page). What else could
explain still counters:
- one engine step longer than the span (a prefill of a prompt far beyond the profile: vLLM V1
  counts a prompt's tokens only when its whole prefill is done, `vllm/v1/metrics/stats.py`,
  and emits nothing for a partial one; an engine so starved of cores that one step outlasts
  the span). The span is therefore a multiple of the stall window, itself at least the
  longest overdue allowance (the engine's own pace for the work owed), never less than 4.5 s at
  the defaults (3 s ejected a starved, healthy vLLM engine in `make demo`): an engine starved
  to 4 s without a token keeps its traffic;
- series we do not read (another model served by the same engine: only the pair's served
  model's series count, as the queue-depth scrape does);
- two probes without answer while the process is merely slow to serve `/metrics` (within
  its own timeout, twice; the attempts waiting there had no byte either).
Counters that moved are progress (it works, for someone): the endpoint's stalls then count
nothing against its breaker and never reach the windows' hang, while overdue attempts that
have somewhere else to go still move on (`progress.stall`). No counters (a 404, a page
without those series, our own client's limit) is no evidence either way: the stall windows'
rules apply unchanged.
"""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple


class Counters(NamedTuple):
    """An engine's cumulative token counters for one served model, as read."""

    prompt_tokens: float
    generation_tokens: float


class Unread(StrEnum):
    """A reading that holds no counters."""

    NO_ANSWER = "no_answer"  # refused, reset or timed out: nothing answered at all
    NO_SERIES = "no_series"  # answered without the counters (404, other series, our limit)


Reading = Counters | Unread


class Verdict(StrEnum):
    HUNG = "hung"  # nothing moved, or nothing answered twice, across the span
    PROGRESS = "progress"  # the counters moved: it works, for someone
    UNKNOWN = "unknown"  # no evidence either way (no counters, or no earlier counters)


def still_verdict(first: Reading, second: Reading) -> Verdict:
    """What two readings of one endpoint, taken at least the span apart while our attempts
    waited there overdue and got no byte, say about the engine.

    Hung: the same counters twice, or no answer to either probe. Progress: different counters
    (a restart's lower counters too: a live engine). Unknown: either reading without series,
    or one without answer beside counters (a slow answer once is not a frozen process)."""
    if first is Unread.NO_SERIES or second is Unread.NO_SERIES:
        return Verdict.UNKNOWN
    if first is Unread.NO_ANSWER or second is Unread.NO_ANSWER:
        return Verdict.HUNG if first is second else Verdict.UNKNOWN
    return Verdict.HUNG if first == second else Verdict.PROGRESS
