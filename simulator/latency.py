"""The simulated engine's latency model (PURE: no clock, no I/O; randomness comes in as draws).

TTFT grows linearly with prompt tokens (prefill); TPOT grows linearly with the number of
requests decoding at the same time (batching slows every step). Jitter is multiplicative.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.config import SimPairConfig


@dataclass(frozen=True, slots=True)
class LatencyModel:
    """Seconds per phase; `draw` arguments are uniform samples in [0, 1) for the jitter."""

    ttft_base_s: float
    ttft_per_input_token_s: float
    tpot_base_s: float
    tpot_per_running_s: float
    jitter_ratio: float

    @classmethod
    def from_config(cls, config: SimPairConfig) -> LatencyModel:
        return cls(
            ttft_base_s=config.ttft_base_s,
            ttft_per_input_token_s=config.ttft_per_input_token_s,
            tpot_base_s=config.tpot_base_s,
            tpot_per_running_s=config.tpot_per_running_s,
            jitter_ratio=config.jitter_ratio,
        )

    def jitter(self, draw: float) -> float:
        """Factor in [1 - jitter_ratio, 1 + jitter_ratio)."""
        return 1.0 + self.jitter_ratio * (2.0 * draw - 1.0)

    def ttft_s(self, prompt_tokens: int, draw: float = 0.5) -> float:
        """Prefill time once the request holds a slot (queueing is not included)."""
        base = self.ttft_base_s + self.ttft_per_input_token_s * max(prompt_tokens, 0)
        return base * self.jitter(draw)

    def tpot_s(self, running: int, draw: float = 0.5) -> float:
        """Time for one more output token while `running` requests decode (>= 1)."""
        base = self.tpot_base_s + self.tpot_per_running_s * (max(running, 1) - 1)
        return base * self.jitter(draw)
