"""How long the real demo will take here, from the speed its engines showed in the smoke step.

Pure. The profile of a pair asks every eval item (its `max_tokens` each, 8 in flight) and the
load sweep; the replay sends the workload. Both are counted in output tokens and divided by
what the engines decode together: the smoke completions' tokens per second (measured with
every engine starting at once on the same cores) times `BATCHING`, the ratio measured between
the two on this machine (docs/engines.md, "Figures measured here").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# Output tokens per second of a profile (8 eval requests in flight, one pair at a time) over
# the smoke completion's tokens per second (one request each, all engines at once): 4.3 in a
# measured `make demo` here (5768 tokens a pair in 74-116 s; smoke 13.0-16.7 tok/s).
BATCHING = 4.3
REPLAY_TOKENS = 16  # about what a replayed request decodes (most answers are short)


@dataclass(frozen=True, slots=True)
class Estimate:
    profile_s: float
    replay_s: float

    @property
    def total_s(self) -> float:
        return self.profile_s + self.replay_s

    def line(self, pairs: int) -> str:
        return (
            f"  estimate from the smoke completions: profiling ~{self.profile_s / 60:.0f} min "
            f"({pairs} pairs), replay ~{self.replay_s / 60:.0f} min; about "
            f"{self.total_s / 60:.0f} min from here"
        )


def estimate(
    smoke_tokens_per_s: Sequence[float],
    eval_tokens: int,
    load_tokens: int,
    requests: int,
    parallel: int = 1,
) -> Estimate | None:
    """The demo's remaining duration, or None when no engine was measured."""
    speeds = [s for s in smoke_tokens_per_s if s > 0]
    if not speeds:
        return None
    rate = BATCHING * sum(speeds) / len(speeds)
    per_pair = (eval_tokens + load_tokens) / rate
    rounds = -(-len(speeds) // max(parallel, 1))
    return Estimate(per_pair * rounds, requests * REPLAY_TOKENS / rate)
