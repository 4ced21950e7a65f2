"""Routing policy: the operator's defaults per category and the table-wide routing knobs.

Written by people (YAML or JSON), validated by the control plane with `load_policy` (unknown
keys rejected by path), and embedded in every RoutingTable so data planes apply the same
defaults the table was built for.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from contracts.names import KNOWN_CATEGORIES, QUANT_PATTERN, Category, Family
from contracts.strict import find_unknown_keys

# A floor is met at this one-sided confidence, on at least this many eval items
# (docs/accuracy.md). Here, not in accuracy_bound.py, so data planes reading a policy do not
# import scipy.
DEFAULT_FLOOR_CONFIDENCE = 0.90
DEFAULT_MIN_EVAL_ITEMS = 20

POLICY_SCHEMA_VERSION = "1.0"

Ratio = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
PosFloat = Annotated[float, Field(gt=0.0, allow_inf_nan=False)]
BudgetMode = Literal["best-effort", "strict"]
Objective = Literal["cost", "quality-first"]
MEASURED_QUANTILES = (0.5, 0.9, 0.95, 0.99)
# A declared weight format: fp32, bf16, fp16, fp8, int8, int4, or any fpN / bfN / intN.
FORMAT_PATTERN = r"^(?:fp|bf|int)(?:[1-9]|[1-5][0-9]|6[0-4])$"
DeclaredFormat = Annotated[str, Field(pattern=FORMAT_PATTERN)]
QuantizationName = Annotated[str, Field(pattern=QUANT_PATTERN)]


class _Policy(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class CategoryPolicy(_Policy):
    """Defaults for requests of one category that carry no budget headers."""

    min_accuracy: Ratio = 0.0
    latency_budget_s: PosFloat | None = None
    ttft_budget_s: PosFloat | None = None
    typical_output_tokens: int = Field(default=256, ge=1, le=1_000_000)


class UtilityWeights(_Policy):
    """Weights of the utility score (see control_plane/build/scoring.py for the formula)."""

    accuracy: float = Field(default=1.0, ge=0.0, le=100.0)
    cost: float = Field(default=0.5, ge=0.0, le=100.0)
    latency: float = Field(default=0.25, ge=0.0, le=100.0)


class ShadowPolicy(_Policy):
    """Shadow mode: decide and count, but send traffic to `default_pair`."""

    enabled: bool = False
    default_pair: str | None = None

    @model_validator(mode="after")
    def _pair_when_enabled(self) -> ShadowPolicy:
        if self.enabled and not self.default_pair:
            raise ValueError("shadow.default_pair is required when shadow.enabled is true")
        return self


class RefitPolicy(_Policy):
    """Latency feedback refits (docs/control_plane.md "Latency feedback")."""

    enabled: bool = True
    drift_threshold_ratio: float = Field(
        default=0.25,
        gt=0.0,
        lt=1.0,
        description="refit when observed / predicted at the table quantile is above 1 + this "
        "or below 1 - this",
    )
    min_samples: int = Field(default=200, ge=1, description="observations of a pair needed")
    prior_samples: int = Field(
        default=200, ge=0, description="weight of the current table in the blend, in samples"
    )
    window_s: float = Field(default=600.0, gt=0.0, le=86_400.0, description="feedback window")
    min_interval_s: float = Field(default=300.0, ge=0.0, description="between two refits")
    pinned_version: int | None = Field(
        default=None, ge=1, description="while this version is current, never refit"
    )
    # Evidence (added in policy 1.x; docs/control_plane.md "Latency feedback"): what a refit
    # needs before it is published, and what makes the loop take it back.
    outlier_share: float = Field(
        default=0.1,
        ge=0.0,
        lt=0.5,
        description="share of a cell's samples that cannot fake its drift: slower needs the "
        "ratio at quantile q - this above 1 + threshold, faster the one at q + this x (1 - q) "
        "below 1 - threshold",
    )
    min_cell_samples: int = Field(
        default=50, ge=1, description="samples a load x size cell needs to count"
    )
    consensus_share: float = Field(
        default=0.75,
        gt=0.5,
        le=1.0,
        description="share of the counted samples whose cells drift the same way",
    )
    max_client_share: float = Field(
        default=0.1,
        gt=0.0,
        le=1.0,
        description="most of a pair's samples one identified client supplies (per data plane "
        "and feedback window); at most outlier_share, one client cannot move a cell",
    )
    watch_min_samples: int = Field(
        default=100, ge=1, description="answers on a refit table before the watch judges it"
    )
    revert_drop_ratio: float = Field(
        default=0.02,
        ge=0.0,
        lt=1.0,
        description="revert a refit when budget attainment on its pairs falls more than this",
    )
    revert_hold_s: float = Field(
        default=1800.0, ge=0.0, description="no refit while a revert younger than this is current"
    )


class AccuracyCheckPolicy(_Policy):
    """Shadow re-asks on the reference pair (docs/control_plane.md "Accuracy drift")."""

    sample_rate: Ratio = Field(
        default=0.0, description="share of lower-precision answers re-asked (0 = off)"
    )
    max_checks_per_hour: int = Field(default=600, ge=0, description="per data plane")
    max_usd_per_hour: float = Field(
        default=1.0,
        ge=0.0,
        allow_inf_nan=False,
        description="re-asks' spend per data plane per hour, at the pairs' prices (reserved "
        "before sending at the cap's worst case, settled from the answers' usage)",
    )
    max_tokens: int = Field(
        default=256, ge=1, description="max_tokens of a re-ask, whatever the client asked"
    )
    max_input_tokens: int = Field(
        default=2048,
        ge=1,
        description="a request whose prompt is estimated above this many tokens is not "
        "re-asked, whoever sent it: one check's cost stays bounded (docs/accuracy.md)",
    )
    min_checks: int = Field(default=100, ge=1, description="checks of a pair and category")
    confidence: float = Field(
        default=0.99,
        gt=0.5,
        lt=1.0,
        description="a demotion needs the live evidence to contradict the pair's bound at "
        "this confidence, and publishes a lower bound that holds at it (docs/accuracy.md)",
    )
    canary_looks: int = Field(
        default=20,
        ge=1,
        le=10_000,
        description="looks at one window's canary counts that a demotion is corrected for "
        "(Bonferroni: each look's upper bound at 1 - (1 - confidence) / 2 / looks): the "
        "refit window over the loop's check interval, 600 s / 30 s by default "
        '(docs/accuracy.md "Canary items")',
    )
    demote: bool = Field(
        default=True,
        description="publish a table with the canary items' accuracy of a drifting pair "
        '(docs/accuracy.md "Canary items"; agreement re-asks never demote by themselves)',
    )


PriorityName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_-]{0,31}$")]
# The name of an InferenceObjective (a Kubernetes object name: a DNS-1123 subdomain).
ObjectiveName = Annotated[
    str, Field(pattern=r"^[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?$", max_length=253)
]


class PriorityClass(_Policy):
    """One `X-Priority` class (docs/data_plane.md, "Tenants, priorities and admission")."""

    share: Ratio = Field(
        default=1.0,
        description="most of a pair's sustainable concurrency (for the request's budget) this "
        "class may fill while the pairs that could serve it are overloaded; the rest is kept "
        "for the classes above it (a sheddable class's requests past it are shed)",
    )
    sheddable: bool = Field(
        default=True,
        description="may be shed (429) when load alone keeps every pair from its budget",
    )


def _default_priorities() -> dict[str, PriorityClass]:
    return {
        "critical": PriorityClass(share=1.0, sheddable=False),
        "standard": PriorityClass(share=0.75, sheddable=True),
        "batch": PriorityClass(share=0.5, sheddable=True),
    }


def _default_categories() -> dict[str, CategoryPolicy]:
    return {name: CategoryPolicy() for name in KNOWN_CATEGORIES}


class Policy(_Policy):
    """Table-wide routing policy."""

    schema_version: str = Field(default=POLICY_SCHEMA_VERSION, pattern=r"^1\.\d+$")
    latency_quantile: float = Field(default=0.95, description="one of 0.5, 0.9, 0.95, 0.99")
    default_category: Category = "chat"
    categories: dict[Category, CategoryPolicy] = Field(default_factory=_default_categories)
    budget_mode: BudgetMode = "best-effort"
    baselines: dict[Family, str] = Field(
        default_factory=dict,
        description="family -> baseline pair for savings; default: the family's most precise",
    )
    shadow: ShadowPolicy = ShadowPolicy()
    canary_fraction: Ratio = Field(
        default=1.0, description="share of traffic routed adaptively; the rest goes to baselines"
    )
    utility_weights: UtilityWeights = UtilityWeights()
    reference_input_tokens: int = Field(default=512, ge=1, description="for cost ordering")
    reference_output_tokens: int = Field(default=256, ge=1, description="for cost ordering")
    category_confidence: Ratio = Field(
        default=0.6,
        description="the classifier decides a request's category alone only when its top "
        "probability reaches this; below it the request routes under the strictest floor of "
        "the categories it cannot rule out (docs/classifier.md)",
    )
    doubt_category: Category | None = Field(
        default=None,
        description="when set, requests the classifier is unsure about route under this "
        "category instead",
    )
    objective: Objective = Field(
        default="cost",
        description="cost: the cheapest feasible pair; quality-first: the most precise one",
    )
    ladder_hysteresis_ratio: float = Field(
        default=0.1,
        ge=0.0,
        lt=1.0,
        description="quality-first: a pair stepped down under load is chosen again only when "
        "its prediction fits (1 - this) x the budget",
    )
    priorities: dict[PriorityName, PriorityClass] = Field(
        default_factory=_default_priorities,
        description="X-Priority classes: share of capacity and whether sheddable",
    )
    default_priority: PriorityName = Field(
        default="standard", description="the class of a request without X-Priority"
    )
    objectives: dict[ObjectiveName, PriorityName] = Field(
        default_factory=dict,
        description="llm-d InferenceObjective name -> priority class, for a request without "
        "X-Priority that names its objective (x-llm-d-inference-objective)",
    )
    refit: RefitPolicy = RefitPolicy()
    accuracy_check: AccuracyCheckPolicy = AccuracyCheckPolicy()
    floor_confidence: float = Field(
        default=DEFAULT_FLOOR_CONFIDENCE,
        ge=0.5,
        le=0.999,
        description="a pair meets a floor when its one-sided lower bound at this confidence does",
    )
    min_eval_items: int = Field(
        default=DEFAULT_MIN_EVAL_ITEMS,
        ge=1,
        le=1_000_000,
        description="below this many eval items a category's accuracy is unknown (no floor met)",
    )
    precision_formats: dict[QuantizationName, DeclaredFormat] = Field(
        default_factory=dict,
        description="quantization -> declared format (e.g. fp6) for names the order cannot read",
    )

    @field_validator("latency_quantile")
    @classmethod
    def _measured_quantile(cls, value: float) -> float:
        if value not in MEASURED_QUANTILES:
            raise ValueError(f"must be one of {MEASURED_QUANTILES} (the quantiles profiles hold)")
        return value

    @model_validator(mode="after")
    def _default_category_known(self) -> Policy:
        if self.default_category not in self.categories:
            raise ValueError(f"default_category {self.default_category!r} is not in categories")
        if self.doubt_category is not None and self.doubt_category not in self.categories:
            raise ValueError(f"doubt_category {self.doubt_category!r} is not in categories")
        if self.default_priority not in self.priorities:
            raise ValueError(f"default_priority {self.default_priority!r} is not in priorities")
        for objective, priority in self.objectives.items():
            if priority not in self.priorities:
                raise ValueError(f"objectives.{objective}: {priority!r} is not in priorities")
        return self


class PolicyError(ValueError):
    """A policy document is invalid; `errors` holds one 'path: message' line per problem."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("invalid policy: " + "; ".join(errors))
        self.errors = errors


def load_policy(data: Any) -> Policy:
    """Validate a human-written policy: unknown keys and bad values both fail, by field path."""
    if not isinstance(data, dict):
        raise PolicyError(["(root): must be a mapping"])
    problems = [f"{p}: unknown field" for p in find_unknown_keys(Policy, data)]
    try:
        policy = Policy.model_validate(data)
    except ValidationError as err:
        problems += [
            f"{'.'.join(str(x) for x in e['loc']) or '(root)'}: {e['msg']}" for e in err.errors()
        ]
        raise PolicyError(problems) from err
    if problems:
        raise PolicyError(problems)
    return policy
