"""Hot-path value types of the data plane: immutable, slotted, built once per table or request.

PURE: imports only the stdlib and `contracts`. Every other data-plane module speaks these types;
the routing decision (`routing.choose_route`) is a function of them alone. Types built once per
table are frozen dataclasses; types built for every request are `per_request` (immutable to
the type checker, without a frozen dataclass's run-time cost).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple, Protocol, TypeVar, dataclass_transform

from contracts.policy import Policy
from contracts.tokenizer_ref import TemplateTokens

_T = TypeVar("_T")


@dataclass_transform(frozen_default=True)
def per_request(cls: type[_T]) -> type[_T]:
    """A value type built for every request: a slotted, hashable dataclass whose fields mypy
    treats as read-only (assigning one is an error in `make test`), as it does a frozen
    dataclass's. A frozen dataclass also checks that at run time: its `__init__` sets every
    field through `object.__setattr__`, about five times the cost of a plain slot, and a
    request builds some seventy such fields (docs/style.md, "Types, pydantic, config";
    `make bench` prints the cost next to the frozen form's)."""
    return dataclass(slots=True, unsafe_hash=True)(cls)


# --- budgets and request facts ------------------------------------------------------------


class BudgetMode(StrEnum):
    BEST_EFFORT = "best-effort"
    STRICT = "strict"


@per_request
class Budget:
    """What the client asked for in headers; None = use the policy's default for the category."""

    latency_s: float | None = None
    ttft_s: float | None = None
    min_accuracy: float | None = None
    max_cost_usd: float | None = None
    mode: BudgetMode | None = None
    category: str | None = None  # X-Task-Category override


@per_request
class RequestFacts:
    """What the data plane read from the body (never the prompt text itself)."""

    alias: str  # the `model` field: "auto", a family, or family@quantization
    category: str  # classifier's category (before any X-Task-Category override)
    complexity: float  # classifier's 0..1 complexity score
    input_chars: int  # characters of prompt text, for per-family token estimates
    max_output_tokens: int | None  # max_tokens / max_completion_tokens, when given
    stream: bool = False
    wants_json: bool = False  # response_format asks for JSON
    doubt: CategoryDoubt | None = None  # set when the classifier was unsure (docs/classifier.md)


@per_request
class RouteRequest:
    facts: RequestFacts
    budget: Budget


# --- the compiled table -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CompiledEndpoint:
    id: str  # e.g. "fam@q#0": what metrics, logs and the breaker key on
    url: str  # internal; never shown to clients


@dataclass(frozen=True, slots=True)
class CompiledPair:
    """One table entry, flattened for a linear scan (prices per token, not per million)."""

    pair: str
    family: str
    quantization: str
    served_model_name: str
    endpoints: tuple[CompiledEndpoint, ...]
    context_length: int
    chars_per_token: float
    input_usd_per_token: float
    output_usd_per_token: float
    ttft_base_s: float
    ttft_per_input_token_s: float
    ttft_per_load_s: float
    tpot_base_s: float
    tpot_per_load_s: float
    accuracy: Mapping[str, float]  # category -> accuracy; a missing category counts as 0
    precision_rank: int  # 0 = most precise of its family
    order: int  # position in the table's cost order (the stable tie-break key)
    # The highest concurrency the profile measured on one endpoint: beyond it the fit is not
    # trusted (feasibility.latency_violation), and it is the load one replica is known to
    # sustain (the autoscaling signal's unit, docs/METRICS.md "Autoscaling"). inf: not known.
    max_profiled_load: float = math.inf
    # The best output tokens a second one endpoint sustained in the profile (the table's
    # `sustained_output_tokens_per_s`): what the canary items' share is of. inf: not known.
    sustained_output_tokens_per_s: float = math.inf
    # The quality-first objective's ladder: 0 = the most precise declared format and bits
    # (FP16 < FP8 < INT8 < INT4; `decision.ladder.ladder_rank`).
    ladder_rank: int = 0
    # What floors are compared with (docs/accuracy.md): the table's lower bound per
    # category (the point estimate for tables built without bounds), and per category the
    # words that say where it comes from ("at 90% confidence on chat: 20/25 = 0.80, lower
    # bound 0.66"); empty for tables built without bounds.
    accuracy_bound: Mapping[str, float] = field(default_factory=dict)
    floor_basis: Mapping[str, str] = field(default_factory=dict)
    # Best effort's model (`decision.chance`): per category P(true accuracy >= k / 1000),
    # k = 0..1000 (a missing category: unknown); the spread of ln(TTFT) and ln(TPOT) around
    # the line; z of the line's quantile (1.645 at p95).
    accuracy_tail: Mapping[str, Sequence[float]] = field(default_factory=dict, repr=False)
    ttft_log_spread: float = 0.0
    tpot_log_spread: float = 0.0
    latency_z: float = 0.0
    # The TTFT and TPOT load terms at loads 0, 1, ..., max_profiled_load (`load_terms`);
    # empty: per-load coefficient x load.
    ttft_by_load: tuple[float, ...] = ()
    tpot_by_load: tuple[float, ...] = ()
    # TTFT's seconds per input token above `ttft_per_input_token_s` at the same loads (a
    # prompt waits for the prompts queued ahead of it); empty: none (filled with zeros).
    ttft_per_input_by_load: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if self.ttft_by_load and not self.ttft_per_input_by_load:
            zeros = (0.0,) * len(self.ttft_by_load)
            object.__setattr__(self, "ttft_per_input_by_load", zeros)
        if len(self.ttft_per_input_by_load) != len(self.ttft_by_load):
            raise ValueError("ttft_per_input_by_load needs one value per ttft_by_load")


def load_terms(pair: CompiledPair, at: float, input_tokens: int) -> tuple[float, float]:
    """(TTFT, TPOT) load terms at load `at` for a prompt of `input_tokens`: interpolated
    between the compiled terms at the whole loads around it, the per-load coefficients beyond
    the last (the per-token cost held at the last) (PURE; `scan` inlines the in-range case)."""
    ttl, tpl, itl = pair.ttft_by_load, pair.tpot_by_load, pair.ttft_per_input_by_load
    if not ttl:
        return pair.ttft_per_load_s * at, pair.tpot_per_load_s * at
    top = len(ttl) - 1
    f = int(at)
    if f < top:
        w = at - f
        per_input = itl[f] + (itl[f + 1] - itl[f]) * w
        ttft = ttl[f] + (ttl[f + 1] - ttl[f]) * w + per_input * input_tokens
        return ttft, tpl[f] + (tpl[f + 1] - tpl[f]) * w
    extra = at - top
    ttft = ttl[top] + pair.ttft_per_load_s * extra + itl[top] * input_tokens
    return ttft, tpl[top] + pair.tpot_per_load_s * extra


# One whole-load interval [f, f + 1) of `load_terms`' in-range case: (TTFT term at f, its rise
# to f + 1, TTFT's extra seconds per input token at f, its rise, TPOT term at f, its rise).
LoadStep = tuple[float, float, float, float, float, float]


def load_steps(pair: CompiledPair) -> tuple[LoadStep, ...]:
    """`load_terms`' in-range case tabulated per whole load f < max_profiled_load, for the
    scan: at a load `at` with f = int(at) below their length, w = at - f, and s = steps[f],
    TTFT's term is s[0] + s[1] * w + (s[2] + s[3] * w) * tokens and TPOT's s[4] + s[5] * w,
    the same operations on the same numbers as `load_terms` (the rises are its differences,
    taken once per table version instead of once per request); empty without the tables."""
    ttl, tpl, itl = pair.ttft_by_load, pair.tpot_by_load, pair.ttft_per_input_by_load
    return tuple(
        (
            ttl[f],
            ttl[f + 1] - ttl[f],
            itl[f],
            itl[f + 1] - itl[f],
            tpl[f],
            tpl[f + 1] - tpl[f],
        )
        for f in range(len(ttl) - 1)
    )


class ScanRow(NamedTuple):
    """One pair as `choose_route` scans it: every constant its feasibility test reads, in one
    flat tuple (unpacked in the loop), built once per table version by `compile_table`."""

    order: int  # = pair.order: its position in `CompiledTable.pairs` and the accuracy tuples
    pair: CompiledPair
    endpoints: tuple[CompiledEndpoint, ...]
    endpoint_ids: tuple[str, ...]
    swapped: tuple[CompiledEndpoint, ...]  # endpoints[::-1]: the order when the second is freer
    chars_per_token: float
    context_length: int
    input_usd_per_token: float
    output_usd_per_token: float
    ttft_base_s: float
    ttft_per_input_token_s: float
    ttft_per_load_s: float
    tpot_base_s: float
    tpot_per_load_s: float
    max_profiled_load: float  # beyond it no latency promise (feasibility.latency_violation)
    load_steps: tuple[LoadStep, ...] = ()  # = load_steps(pair): `load_terms` below the top


class CostFloor(NamedTuple):
    """The cheapest any row from one position of an alias's scan onwards can be: with the
    most characters per token (fewest tokens) and the lowest prices among those rows. Lets a
    scan stop once no later row can undercut the best pair found."""

    max_chars_per_token: float
    min_input_usd_per_token: float
    min_output_usd_per_token: float
    # The next position whose floor differs (len(rows) for the last run): a scan looking
    # for where to stop skips the positions in between, whose floors are this one.
    next_change: int = 0


@dataclass(frozen=True, slots=True)
class CategoryDefaults:
    min_accuracy: float
    latency_budget_s: float | None
    ttft_budget_s: float | None
    typical_output_tokens: int


@dataclass(frozen=True, slots=True)
class AliasTokenizer:
    """The tokenizer every pair of an alias names (`compile.alias_tokenizers`): the file
    (`path`: where the profiler read it; `sha256`: what a loaded file must hash to), the
    characters one counted token stands for in `input_chars` (the largest chars_per_token
    among the alias's pairs, so each pair's estimate is at least the count), the most
    characters a request's count reads (`max_chars`: the alias's largest context, at that
    figure, twice over; the rest is priced per character) and what the chat template adds to
    a chat body's text (`template`, as the profiler measured it; None: the text alone) and
    the special tokens the engine adds to each completions prompt (`special_tokens`, its BOS;
    0: none measured)."""

    path: str
    sha256: str
    token_chars: float
    max_chars: int
    template: TemplateTokens | None = None
    special_tokens: int = 0


@dataclass(frozen=True, slots=True)
class CompiledTable:
    version: int
    content_sha256: str
    pairs: tuple[CompiledPair, ...]  # cost order
    by_alias: Mapping[str, tuple[CompiledPair, ...]]  # "auto", families, pair names -> cost order
    categories: Mapping[str, CategoryDefaults]
    default_category: str
    default_mode: BudgetMode
    baselines: Mapping[str, CompiledPair]  # family -> baseline pair (for savings)
    more_precise: Mapping[str, CompiledPair]  # pair -> next more precise pair of its family
    policy: Policy  # shadow / canary knobs are read from here
    # The scan's view of `by_alias` (same keys, same order) and accuracy per category aligned
    # with `pairs` (an unmeasured category is 0.0), so a decision looks nothing up per pair.
    scan_rows: Mapping[str, tuple[ScanRow, ...]]
    cost_floors: Mapping[str, tuple[CostFloor, ...]]  # aligned with scan_rows[alias]
    accuracy_by_category: Mapping[str, tuple[float, ...]]  # the bounds floors compare with
    classifier: CategoryScorer  # the table's category classifier, else the built-in one
    fleet_baseline: CompiledPair | None = None  # the fleet's best pair, for savings
    # pairs refits made slower than their profile; data planes probe them (latency_probe)
    slowed_pairs: tuple[CompiledPair, ...] = ()
    # category -> pairs an accuracy demotion in force lowered in it, in cost order; data planes
    # check them on other pairs' traffic so the demotion can be lifted (`check_sampling`)
    demoted: Mapping[str, tuple[CompiledPair, ...]] = field(default_factory=dict)
    # alias -> text characters one JSON character counts as in `input_chars`: the largest
    # chars_per_token / json_chars_per_token among the alias's pairs (`compile.json_weights`);
    # a missing alias counts JSON as text
    json_weight: Mapping[str, float] = field(default_factory=dict)
    # alias -> characters one image part counts as in `input_chars`: the largest image_tokens
    # (576 where not measured) x chars_per_token among the alias's pairs
    # (`compile.image_chars`); a missing alias counts IMAGE_CHARS (576 tokens at 4.0)
    image_chars: Mapping[str, int] = field(default_factory=dict)
    # alias -> the tokenizer all its pairs name (`compile.alias_tokenizers`); a missing alias
    # is priced per character (docs/data_plane.md, "Prompt size")
    tokenizers: Mapping[str, AliasTokenizer] = field(default_factory=dict)


# --- health and load ----------------------------------------------------------------------


@per_request
class HealthView:
    """Snapshot for one decision: ejected endpoints and load per endpoint id.

    load[endpoint_id] = in-flight requests this process tracks + queue depth scraped from the
    engine (waiting + running) when scraping is enabled. Missing ids mean load 0.
    """

    open_endpoints: frozenset[str] = frozenset()
    load: Mapping[str, float] = field(default_factory=dict)
    # Quality-first: (pair, category) pairs load pushed off the precision ladder
    # (the hysteresis state, `decision.ladder`; kept by `Health` from the last decision).
    ladder: frozenset[tuple[str, str]] = frozenset()


# --- decisions ----------------------------------------------------------------------------


class RouteReason(StrEnum):
    """Why the first candidate was chosen (X-Route-Reason and a metric label)."""

    CHEAPEST_FEASIBLE = "cheapest_feasible"
    LATENCY_RELAXED = "best_effort_latency_relaxed"  # best effort: the pair's latency unproven
    FLOOR_RELAXED = "best_effort_below_floor"  # best effort: the pair's floor unproven
    UNPROVEN = "best_effort_unproven"  # best effort: neither its floor nor its latency proven
    SHADOW = "shadow"  # shadow mode: decision counted, traffic to the default pair
    CANARY_BASELINE = "canary_baseline"  # outside the canary fraction: baseline pair
    MOST_PRECISE_FEASIBLE = "most_precise_feasible"  # quality-first objective


class Rejection(StrEnum):
    """Why one pair was not feasible (shown by /v1/route)."""

    NOT_ALLOWED = "not_allowed_by_model"
    BREAKER_OPEN = "breaker_open"
    CONTEXT_TOO_LONG = "context_too_long"
    BELOW_FLOOR = "below_accuracy_floor"
    TOO_SLOW = "too_slow"
    TOO_EXPENSIVE = "too_expensive"


class NoRouteReason(StrEnum):
    UNKNOWN_MODEL = "unknown_model"
    BUDGET_INFEASIBLE = "budget_infeasible"  # strict mode; `binding` names the constraint
    ALL_UNHEALTHY = "all_unhealthy"


@per_request
class Candidate:
    """A pair to try, with its endpoints in preference order and the figures behind the choice."""

    pair: CompiledPair
    endpoints: tuple[CompiledEndpoint, ...]
    input_tokens: int
    output_tokens: int
    predicted_ttft_s: float
    predicted_latency_s: float
    estimated_cost_usd: float
    load: float = 1.0  # load behind the prediction (first endpoint, this request incl.)
    chance: SloChance | None = None  # set on best-effort candidates (`decision.chance`)


@per_request
class SloChance:
    """Best effort's estimate for one candidate (`decision.chance`): the chance its true
    accuracy meets the request's floors and the chance it answers within the budgets, and
    which of the two the table proves (bound >= floor; prediction within the budget)."""

    p_accuracy: float
    p_latency: float
    floor_proven: bool
    latency_proven: bool

    @property
    def p_meet(self) -> float:
        """P(floor and budget both met): the two are taken as independent."""
        return self.p_accuracy * self.p_latency

    @property
    def reason(self) -> RouteReason:
        """The best-effort reason naming what the table leaves unproven for this pair."""
        if self.floor_proven:
            return RouteReason.LATENCY_RELAXED
        return RouteReason.FLOOR_RELAXED if self.latency_proven else RouteReason.UNPROVEN

    @property
    def reason_suffix(self) -> str:
        """The X-Route-Reason suffix: the chance and what is unproven (ASCII)."""
        floor = "proven" if self.floor_proven else "unproven"
        latency = "proven" if self.latency_proven else "unproven"
        return (
            f"; p_meet {self.p_meet:.2f} (floor {floor} p {self.p_accuracy:.2f}, "
            f"latency {latency} p {self.p_latency:.2f})"
        )


@per_request
class Rejected:
    pair: str
    reason: Rejection
    detail: str  # operator words, e.g. "predicted 2.40 s > budget 1.50 s"


@per_request
class RouteDecision:
    """`candidates` and `rejected` are read-only sequences; `choose_route` hands out lazy ones
    (`data_plane.decision.chain`) that build their items on first read, so the explanation costs
    nothing on requests that never ask for it."""

    candidates: Sequence[Candidate]  # non-empty; the first is the choice, the rest fallbacks
    reason: RouteReason
    category: str
    complexity: float
    budget_latency_s: float | None  # the effective budgets after policy defaults
    budget_ttft_s: float | None
    min_accuracy: float
    rejected: Sequence[Rejected] = ()
    # What rollout, explain and the proxy also need (set by the routing core).
    alias: str = "auto"  # the `model` field the decision was made for
    input_chars: int = 0  # prompt characters, to price pairs outside `candidates`
    max_cost_usd: float | None = None  # effective cost ceiling (headers only; no policy default)
    mode: BudgetMode = BudgetMode.BEST_EFFORT  # effective budget mode
    adaptive: RouteDecision | None = None  # set by rollout: the decision before shadow/canary
    # Quality-first: the precision ladder's state after this decision (None: not kept).
    ladder: frozenset[tuple[str, str]] | None = None
    # Under doubt: the other plausible categories' (category, floor) every candidate also
    # meets in its own column (`decision.feasibility.doubt_floors`; empty without doubt).
    doubt_floors: tuple[tuple[str, float], ...] = ()


@per_request
class NoRoute:
    reason: NoRouteReason
    detail: str
    binding: Rejection | None = None  # the constraint that ruled out the last pairs
    rejected: tuple[Rejected, ...] = ()
    mode: BudgetMode | None = None  # the effective budget mode (BUDGET_INFEASIBLE only)


# --- category classification (docs/classifier.md) ----------------------------------------


class CategoryScorer(Protocol):
    """A compiled category classifier (`data_plane.request.category.CategoryClassifier`)."""

    @property
    def categories(self) -> tuple[str, ...]: ...

    @property
    def model_sha256(self) -> str: ...

    @property
    def builtin(self) -> bool: ...

    def probabilities(self, text: str) -> list[float]:
        """P(category | text), in `categories` order."""
        ...

    def probabilities_of(self, scan: Any) -> list[float]:
        """`probabilities` of a `data_plane.request.prompt_scan.PromptScan`."""
        ...

    def evaluate(self, scan: Any) -> tuple[list[float], float]:
        """(P(category), P(high complexity)) of a `PromptScan`."""
        ...

    def evaluate_text(self, text: str) -> tuple[list[float], float]:
        """`evaluate` of `text`'s `PromptScan` (implementations may remember recent ones)."""
        ...


@per_request
class CategoryDoubt:
    """The classifier was unsure: its top category and probability, the categories it could
    not rule out (best first), and the category the request was routed under."""

    top: str
    probability: float
    plausible: tuple[str, ...]
    routed_as: str

    @property
    def reason_suffix(self) -> str:
        """The X-Route-Reason suffix of an unsure classification (ASCII: category names are)."""
        plausible = ",".join(self.plausible)
        return f"; category_uncertain: routed as {self.routed_as} (plausible {plausible})"
