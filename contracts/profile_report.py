"""ProfileReport: one measured (model, quantization) pair, as the profiler writes it.

The wire contract between the profiler and the control plane. Readers ignore unknown fields;
the major part of `schema_version` must match `SCHEMA_VERSION`'s.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from contracts.category_model import LabelledPrompt
from contracts.names import Category, Family, HttpUrl, Quantization, pair_name
from contracts.tokenizer_ref import TokenizerRef

SCHEMA_VERSION = "1.0"

NonNegFloat = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]
PosFloat = Annotated[float, Field(gt=0.0, allow_inf_nan=False)]
# prompt tokens of one image part: a whole number, never a float or a string read as one
ImageTokens = Annotated[int, Field(ge=1, le=1_000_000, strict=True)]
Ratio = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]


class _Contract(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class Quantiles(_Contract):
    """Quantiles of one latency distribution, in seconds, with the sample count behind them."""

    n: int = Field(ge=1)
    mean: NonNegFloat
    p50: NonNegFloat
    p90: NonNegFloat
    p95: NonNegFloat
    p99: NonNegFloat

    @model_validator(mode="after")
    def _monotone(self) -> Quantiles:
        if not (self.p50 <= self.p90 <= self.p95 <= self.p99):
            raise ValueError("quantiles must satisfy p50 <= p90 <= p95 <= p99")
        return self

    def at(self, q: float) -> float:
        """The quantile `q` (one of 0.5, 0.9, 0.95, 0.99), for the table's policy."""
        table = {0.5: self.p50, 0.9: self.p90, 0.95: self.p95, 0.99: self.p99}
        if q not in table:
            raise ValueError(f"quantile {q} is not measured; use one of {sorted(table)}")
        return table[q]


class LatencySample(_Contract):
    """One load level: `concurrency` closed-loop streams, `input_tokens` in, `output_tokens` out."""

    concurrency: int = Field(ge=1)
    input_tokens: int = Field(ge=1, description="mean prompt tokens at this level")
    output_tokens: int = Field(ge=1, description="mean completion tokens at this level")
    requests: int = Field(ge=1, description="completed requests measured (warm-up excluded)")
    errors: int = Field(ge=0, default=0)
    duration_s: PosFloat
    ttft_s: Quantiles
    tpot_s: Quantiles
    e2e_s: Quantiles
    output_tokens_per_s: PosFloat = Field(description="aggregate output throughput at this level")
    requests_per_s: PosFloat
    open_loop_rate_rps: PosFloat | None = Field(
        default=None, description="set when the level was an open-loop arrival rate"
    )


ItemId = Annotated[str, Field(min_length=1, max_length=200)]


class CategoryAccuracy(_Contract):
    """Accuracy on one task category, with its sample count and a 95% Wilson interval.

    Added (optional, for paired comparisons within a family): `right`, the exact count of
    right answers, and per item, `items` (eval item ids) with `outcomes` ('1' right, '0'
    wrong, aligned with `items`). `looks` is how many times the profiler could have stopped
    asking on what it had seen so far (`--until-decided`; 1 for a fixed set): the table
    splits 1 - confidence among them (docs/accuracy.md, "How much data a decision needs").
    """

    category: Category
    accuracy: Ratio
    n: int = Field(ge=1)
    ci_low: Ratio
    ci_high: Ratio
    right: int | None = Field(default=None, ge=0)
    items: tuple[ItemId, ...] | None = Field(default=None, max_length=1_000_000)
    outcomes: str | None = Field(default=None, pattern=r"^[01]*$", max_length=1_000_000)
    looks: int = Field(default=1, ge=1, le=100)

    @model_validator(mode="after")
    def _interval(self) -> CategoryAccuracy:
        if not (self.ci_low <= self.accuracy <= self.ci_high):
            raise ValueError("ci_low <= accuracy <= ci_high must hold")
        if self.right is not None and (
            self.right > self.n or abs(self.right / self.n - self.accuracy) > 1e-6
        ):
            raise ValueError("right must be <= n and right / n must equal accuracy")
        if (self.items is None) != (self.outcomes is None):
            raise ValueError("items and outcomes go together")
        if self.items is not None and self.outcomes is not None:
            if len(self.items) != self.n or len(self.outcomes) != self.n:
                raise ValueError("items and outcomes must hold n entries each")
            if len(set(self.items)) != self.n:
                raise ValueError("items must be unique")
            if self.right is not None and self.outcomes.count("1") != self.right:
                raise ValueError("outcomes must count `right` ones")
        return self

    @property
    def right_count(self) -> int:
        """Right answers: `right` when given, else accuracy x n rounded (older reports)."""
        return self.right if self.right is not None else round(self.accuracy * self.n)


class Hardware(_Contract):
    """What serves the pair and what it costs per hour (for derived token prices)."""

    name: str = Field(min_length=1, max_length=200, description="e.g. '1x H100-SXM-80GB'")
    accelerator: str | None = Field(default=None, max_length=200)
    accelerator_count: int = Field(ge=0, default=1)
    hourly_usd: NonNegFloat | None = None


class Prices(_Contract):
    """Explicit prices in USD per million tokens."""

    input_usd_per_mtok: NonNegFloat
    output_usd_per_mtok: NonNegFloat


class Memory(_Contract):
    """Memory facts, where the engine reports them (all optional)."""

    weights_bytes: int | None = Field(default=None, ge=0)
    kv_cache_bytes: int | None = Field(default=None, ge=0)
    peak_bytes: int | None = Field(default=None, ge=0)
    kv_cache_usage_ratio_max: Ratio | None = None


class EngineFacts(_Contract):
    """Facts read from the engine's `/metrics` and `/v1/models` during the run."""

    preemptions_total: int | None = Field(default=None, ge=0)
    max_requests_waiting: int | None = Field(default=None, ge=0)
    max_requests_running: int | None = Field(default=None, ge=0)


Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


class SourceFile(_Contract):
    """One file a part was read from: its name (no folders) and its content's SHA-256."""

    name: str = Field(min_length=1, max_length=300)
    sha256: Sha256


class PartSource(_Contract):
    """Where one part of a report (its latency levels or its accuracy) was measured, when
    not by the profiler run the rest of `Provenance` describes (docs/profiler.md, "Importing
    lm-eval and GuideLLM results")."""

    part: Literal["latency", "accuracy"]
    tool: Literal["gearbox-profiler", "lm-eval", "guidellm"]
    tool_version: str | None = Field(default=None, max_length=100)
    model: str | None = Field(default=None, max_length=300, description="the name it asked for")
    files: tuple[SourceFile, ...] = Field(default=(), max_length=1000)
    imported_at: datetime | None = None


class Provenance(_Contract):
    engine: str = Field(min_length=1, max_length=100, description="e.g. 'vllm'")
    engine_version: str = Field(min_length=1, max_length=100)
    model_revision: str | None = Field(default=None, max_length=200)
    eval_set_id: str = Field(min_length=1, max_length=200)
    eval_set_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    profiler_version: str = Field(min_length=1, max_length=100)
    git_sha: str | None = Field(default=None, max_length=64)
    host: str | None = Field(default=None, max_length=200)
    started_at: datetime
    finished_at: datetime
    partial: bool = Field(default=False, description="the run was interrupted; data is incomplete")
    sources: tuple[PartSource, ...] = Field(
        default=(),
        max_length=2,
        description="where each part came from when it was imported; empty: this profiler "
        "run measured both",
    )

    @model_validator(mode="after")
    def _times(self) -> Provenance:
        if self.finished_at < self.started_at:
            raise ValueError("finished_at must not be before started_at")
        parts = [s.part for s in self.sources]
        if len(set(parts)) != len(parts):
            raise ValueError("sources names a part more than once")
        return self


class ProfileReport(_Contract):
    """Everything measured about one pair. `pair` = `family@quantization`."""

    schema_version: str = Field(default=SCHEMA_VERSION, pattern=r"^\d+\.\d+$")
    kind: Literal["ProfileReport"] = "ProfileReport"
    family: Family
    quantization: Quantization
    served_model_name: str = Field(min_length=1, max_length=200)
    endpoints: tuple[HttpUrl, ...] = Field(min_length=1, max_length=64)
    hardware: Hardware
    prices: Prices | None = None
    context_length: int = Field(ge=16)
    chars_per_token: PosFloat = Field(
        default=4.0, description="prompt characters per prompt token, measured from usage"
    )
    json_chars_per_token: PosFloat | None = Field(
        default=None,
        description="characters per prompt token of JSON schemas (a tools list, rendered with "
        "', ' and ': '), measured from usage: the same chat request with and without the "
        "tools, token difference over character difference; absent: not measured",
    )
    image_tokens: ImageTokens | None = Field(
        default=None,
        description="prompt tokens of one image part, measured from usage: the same chat "
        "request with and without one tiny inline PNG, the difference of prompt_tokens; "
        "absent: not measured (the engine refused images or gave no usage)",
    )
    tokenizer: TokenizerRef | None = Field(
        default=None,
        description="the served model's tokenizer file, where the profiler could read it (the "
        "checkpoint directory /v1/models names as root); absent: none found",
    )
    latency: tuple[LatencySample, ...] = Field(min_length=1)
    accuracy: tuple[CategoryAccuracy, ...] = Field(min_length=1)
    memory: Memory = Memory()
    engine_facts: EngineFacts = EngineFacts()
    provenance: Provenance
    eval_prompts: tuple[LabelledPrompt, ...] = Field(
        default=(),
        max_length=20_000,
        description="the eval items' prompts and categories: the control plane trains the "
        "category classifier on them (docs/classifier.md)",
    )

    @property
    def pair(self) -> str:
        return pair_name(self.family, self.quantization)

    @model_validator(mode="after")
    def _consistent(self) -> ProfileReport:
        major = self.schema_version.split(".")[0]
        if major != SCHEMA_VERSION.split(".")[0]:
            raise ValueError(
                f"schema_version {self.schema_version} is not compatible with {SCHEMA_VERSION}"
            )
        if self.prices is None and self.hardware.hourly_usd is None:
            raise ValueError("either prices or hardware.hourly_usd must be given")
        cats = [a.category for a in self.accuracy]
        if len(set(cats)) != len(cats):
            raise ValueError("accuracy lists a category more than once")
        if len(set(self.endpoints)) != len(self.endpoints):
            raise ValueError("endpoints must be unique")
        return self
