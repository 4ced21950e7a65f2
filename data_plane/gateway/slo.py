"""The latency budget of a decision as the SLO headers llm-d's endpoint picker reads.

PURE. llm-d's names (`x-llm-d-slo-ttft-ms`, `x-llm-d-slo-tpot-ms`, milliseconds, parsed as
floats; docs/gateway.md cites where) go out, and the same values under the older names
(`x-slo-ttft-ms`, `x-slo-tpot-ms`, now deprecated aliases) for pickers that read only those.
TTFT is the effective TTFT budget; TPOT is what the latency budget leaves per output token
once the first token is in (the TTFT budget, else the predicted TTFT).
"""

from __future__ import annotations

from data_plane.domain import Candidate, RouteDecision

TTFT_SLO_HEADERS = ("x-llm-d-slo-ttft-ms", "x-slo-ttft-ms")  # the name, then its old alias
TPOT_SLO_HEADERS = ("x-llm-d-slo-tpot-ms", "x-slo-tpot-ms")
SLO_HEADERS = (*TTFT_SLO_HEADERS, *TPOT_SLO_HEADERS)


def _ms(seconds: float) -> str:
    """Milliseconds, at most three decimals, no exponent (a float the EPP parses)."""
    text = f"{seconds * 1000.0:.3f}".rstrip("0").rstrip(".")
    return text or "0"


def slo_headers(decision: RouteDecision, chosen: Candidate) -> list[tuple[str, str]]:
    """The SLO headers for the chosen candidate; a budget that is not set sends no header.
    A latency budget already spent by the first token leaves no TPOT target to send."""
    out: list[tuple[str, str]] = []
    ttft = decision.budget_ttft_s
    if ttft is not None:
        out += ((name, _ms(ttft)) for name in TTFT_SLO_HEADERS)
    latency = decision.budget_latency_s
    if latency is not None and chosen.output_tokens > 0:
        first_token = ttft if ttft is not None else chosen.predicted_ttft_s
        per_token = (latency - first_token) / chosen.output_tokens
        if per_token > 0:
            out += ((name, _ms(per_token)) for name in TPOT_SLO_HEADERS)
    return out
