"""What a pair sustains within a request's budget: the concurrency at which the table's load
curve still meets it, and the part of it a priority class may fill (docs/data_plane.md,
"Flow control").

PURE. A pair's *sustainable concurrency* for a request is the largest whole load per endpoint
(this request included) at which the table's prediction for it still meets its latency and
TTFT budgets, at most the highest profiled load. A pair that meets the request unloaded
sustains at least 1 (`fleet_sustainable`): an idle endpoint is never "full". A class may fill
`class_line` of it: its share of the sustainable concurrency, rounded down, and never less
than 1 per endpoint, so the headroom kept for the classes above can never make an idle pair
that meets the request refuse it (`decision.saturation` compares these with the requests in
flight; the line binds only while the fleet is pressed). `reserved_line` lowers it further
while the bands above the class are busy: to the sustainable concurrency less their demand
(requests per second decided at the pair over the last second, x the pair's predicted
service time at its sustainable concurrency, / its live endpoints), never below 1 (issue 32).

The table predicts the engine's time, not the client's: the router's own time and the
prediction's error at that load come on top. Each pair's *margin* (`resilience.overshoot`: a
high quantile of this replica's recent answers' observed minus predicted seconds, each client
limited to its share of the samples, decaying over `MARGIN_WINDOW_S` once answers stop) is
taken off the budgets before the sustainable load is sought, at most `MAX_MARGIN_SHARE` of
each budget. What else could explain a margin: engines slower than profiled (a refit
narrows it) or a slow network to them; both make the answers late, which is what it counts.
"""

from __future__ import annotations

import math

from data_plane.decision.feasibility import Limits, input_tokens
from data_plane.domain import CompiledPair, load_terms

MARGIN_WINDOW_S = 10.0  # time constant of a pair's margin once its answers stop
MAX_MARGIN_SHARE = 0.25  # at most this share of a budget is taken off as a margin


def predicted_at(pair: CompiledPair, limits: Limits, input_chars: int, load: float) -> float:
    """Predicted seconds for the whole answer at `load` (this request included)."""
    tokens = input_tokens(pair, input_chars)
    ttft_load, tpot_load = load_terms(pair, load, tokens)
    ttft0 = pair.ttft_base_s + pair.ttft_per_input_token_s * tokens
    return ttft0 + ttft_load + limits.output_tokens * (pair.tpot_base_s + tpot_load)


def _meets(pair: CompiledPair, limits: Limits, prompt: tuple[float, int], load: int) -> bool:
    """Whether the prediction at `load` meets the budgets; `prompt`: (TTFT at no load for
    the prompt, its tokens)."""
    ttft0_s, tokens = prompt
    ttft_load, tpot_load = load_terms(pair, load, tokens)
    ttft = ttft0_s + ttft_load
    if limits.ttft_s is not None and ttft > limits.ttft_s:
        return False
    total = ttft + limits.output_tokens * (pair.tpot_base_s + tpot_load)
    return limits.latency_s is None or total <= limits.latency_s


def less_margin(limits: Limits, margin_s: float) -> Limits:
    """`limits` with `margin_s` taken off each latency and TTFT budget, at most
    MAX_MARGIN_SHARE of each (a wild margin cannot take a whole budget away)."""
    if margin_s <= 0.0:
        return limits
    lat, ttft = limits.latency_s, limits.ttft_s
    return limits._replace(
        latency_s=None if lat is None else lat - min(margin_s, MAX_MARGIN_SHARE * lat),
        ttft_s=None if ttft is None else ttft - min(margin_s, MAX_MARGIN_SHARE * ttft),
    )


def sustainable_load(
    pair: CompiledPair, limits: Limits, input_chars: int, margin_s: float = 0.0
) -> float:
    """The largest whole load per endpoint (this request included) at which `pair` meets the
    request's budgets less `margin_s` (`less_margin`), at most `max_profiled_load`; 0 when
    even an idle endpoint misses them, the profiled maximum (inf when unknown) for a request
    without latency or TTFT budget. The per-load coefficients' line gives a first guess,
    which steps of one load correct to the tabulated terms (they grow with load: a profile's
    latency does not fall as concurrency rises)."""
    top = pair.max_profiled_load
    if limits.latency_s is None and limits.ttft_s is None:
        return top
    limits = less_margin(limits, margin_s)
    top = top if math.isfinite(top) else float(1 << 16)
    tokens = input_tokens(pair, input_chars)
    ttft0 = pair.ttft_base_s + pair.ttft_per_input_token_s * tokens
    guess = top
    if limits.latency_s is not None:
        per = pair.ttft_per_load_s + limits.output_tokens * pair.tpot_per_load_s
        room = limits.latency_s - ttft0 - limits.output_tokens * pair.tpot_base_s
        guess = min(guess, room / per if per > 0 else top)
    if limits.ttft_s is not None and pair.ttft_per_load_s > 0:
        guess = min(guess, (limits.ttft_s - ttft0) / pair.ttft_per_load_s)
    load = int(max(0.0, min(top, guess)))
    while load > 0 and not _meets(pair, limits, (ttft0, tokens), load):
        load -= 1
    while load < top and _meets(pair, limits, (ttft0, tokens), load + 1):
        load += 1
    return float(load)


def steady_load(
    pair: CompiledPair, limits: Limits, input_chars: int, margin_s: float, cap: int = 1024
) -> float:
    """A floor of `fleet_sustainable` that holds for any shorter prompt and smaller margin
    (`decision.headroom`): the largest L (at most `cap` and `max_profiled_load`, at least 1)
    such that every load from 1 to L meets the budgets less `margin_s`. At each load the
    prediction grows with the prompt (its per-token terms are not negative,
    `headroom.prompt_monotone`) and the margin only shrinks the budgets, so those loads
    meet a shorter prompt too, and `sustainable_load`'s search, wherever it starts, stops at
    or above L. On a curve that rises with load it is `fleet_sustainable` itself (up to
    `cap`); on one that falls somewhere it may be less."""
    if limits.latency_s is None and limits.ttft_s is None:
        return fleet_sustainable(pair, limits, input_chars, margin_s)  # the profiled top
    limits = less_margin(limits, margin_s)
    top = pair.max_profiled_load
    tokens = input_tokens(pair, input_chars)
    prompt = (pair.ttft_base_s + pair.ttft_per_input_token_s * tokens, tokens)
    load = 0
    while load < min(top, cap) and _meets(pair, limits, prompt, load + 1):
        load += 1
    return float(max(1, load))


def fleet_sustainable(
    pair: CompiledPair, limits: Limits, input_chars: int, margin_s: float
) -> float:
    """`sustainable_load` for a pair that meets the request unloaded on the table's word (a
    fleet's, or the one chosen): at least one request per endpoint. When only the margin
    says an idle endpoint would miss the budget, the miss is our prediction's error, not
    load: no wait makes room for it, so it never makes the pair full (a margin of 17 ms
    on a tight budget made an idle pair's capacity 0 and shed requests with nothing in
    flight anywhere)."""
    return max(1.0, sustainable_load(pair, limits, input_chars, margin_s))


def class_line(per_endpoint: float, share: float) -> float:
    """The requests per endpoint a class with `share` may fill of `per_endpoint` (this one
    included): its share rounded down, at least 1 (a share of 0.75 of 1 is 1, not 0: the
    headroom kept for higher classes never refuses a request an idle endpoint meets)."""
    return max(1.0, math.floor(share * per_endpoint + 1e-9))


def reserve_per_endpoint(above_rps: float, service_s: float, endpoints: int) -> float:
    """The requests per endpoint the bands above a class hold at a pair on average (Little's
    law): their rate there, `above_rps`, x the service time, / the live endpoints."""
    return above_rps * service_s / max(1, endpoints)


def reserved_line(per_endpoint: float, share: float, reserve: float) -> float:
    """`class_line`, lowered to `per_endpoint` - `reserve` (the higher bands' demand per
    endpoint, `reserve_per_endpoint`) rounded down where that is less, at least 1: an idle
    endpoint never refuses, whatever the bands above ask. A reserve of 0 (the top band:
    none above it) leaves `class_line`."""
    line = class_line(per_endpoint, share)
    if reserve <= 0.0:
        return line
    return max(1.0, min(line, math.floor(per_endpoint - reserve + 1e-9)))
