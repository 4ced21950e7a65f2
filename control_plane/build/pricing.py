"""Token prices of a pair: explicit from the profile, or derived from hourly cost and throughput.

PURE: contract types in, a frozen value out.

Derived prices (USD per million tokens), when the profile carries no explicit prices:

    sustained_tps   = max output_tokens_per_s over the samples whose error ratio <= 5%
                      (all samples when none qualifies)
    output_per_mtok = hardware.hourly_usd / 3600 / sustained_tps * 1e6
    input_per_mtok  = output_per_mtok * DERIVED_INPUT_PRICE_RATIO

i.e. the GPU-hour is charged to the output tokens the hardware sustains at its best measured
load; a prompt token costs a fixed fraction of an output token, because prefill processes a
prompt's tokens in parallel while decode produces one token per step per sequence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from contracts.profile_report import LatencySample, ProfileReport
from control_plane.build.fitting import round_sig

DERIVED_INPUT_PRICE_RATIO = 0.25
MAX_SUSTAINED_ERROR_RATIO = 0.05
SECONDS_PER_HOUR = 3600.0
TOKENS_PER_MTOK = 1_000_000.0


@dataclass(frozen=True, slots=True)
class PairPrices:
    input_usd_per_mtok: float
    output_usd_per_mtok: float
    source: Literal["explicit", "derived"]
    sustained_output_tokens_per_s: float


def sustained_output_tokens_per_s(samples: tuple[LatencySample, ...]) -> float:
    """Best aggregate output throughput over samples that were not overloaded into errors."""

    def error_ratio(s: LatencySample) -> float:
        return s.errors / (s.requests + s.errors)

    healthy = [s for s in samples if error_ratio(s) <= MAX_SUSTAINED_ERROR_RATIO] or list(samples)
    return max(s.output_tokens_per_s for s in healthy)


def price_pair(report: ProfileReport) -> PairPrices:
    """Explicit prices when the report has them, else derived (formula in the module docstring)."""
    sustained = round_sig(sustained_output_tokens_per_s(report.latency))
    if report.prices is not None:
        return PairPrices(
            input_usd_per_mtok=report.prices.input_usd_per_mtok,
            output_usd_per_mtok=report.prices.output_usd_per_mtok,
            source="explicit",
            sustained_output_tokens_per_s=sustained,
        )
    hourly = report.hardware.hourly_usd
    if hourly is None:  # ProfileReport's validator guarantees one of the two
        raise ValueError(f"{report.pair}: neither prices nor hardware.hourly_usd is given")
    output = round_sig(hourly / SECONDS_PER_HOUR / sustained * TOKENS_PER_MTOK)
    return PairPrices(
        input_usd_per_mtok=round_sig(output * DERIVED_INPUT_PRICE_RATIO),
        output_usd_per_mtok=output,
        source="derived",
        sustained_output_tokens_per_s=sustained,
    )
