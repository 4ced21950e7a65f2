"""RoutingTable: what the control plane publishes and every data plane serves from.

Everything a data plane needs to decide in microseconds is precomputed here: fitted latency
coefficients at the policy's quantile, prices, accuracy and utility per category, endpoints,
and entries already ordered by cost. Readers ignore unknown fields; the major part of
`schema_version` must match.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, model_validator

from contracts.category_model import CategoryModel
from contracts.names import Category, Family, HttpUrl, Quantization, pair_name
from contracts.policy import (
    DEFAULT_FLOOR_CONFIDENCE,
    DEFAULT_MIN_EVAL_ITEMS,
    AccuracyCheckPolicy,
    Policy,
    RefitPolicy,
)
from contracts.tokenizer_ref import TokenizerRef

SCHEMA_VERSION = "1.0"

NonNegFloat = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]
PosFloat = Annotated[float, Field(gt=0.0, allow_inf_nan=False)]
ImageTokens = Annotated[int, Field(ge=1, le=1_000_000, strict=True)]  # per image part
Ratio = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
NonNegInt = Annotated[int, Field(ge=0)]


class _Contract(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class LatencyModel(_Contract):
    """Latency at the table's quantile as a function of input tokens and load.

    `load` is the number of requests the endpoint would be serving, this one included
    (in-flight + queued + 1), i.e. the closed-loop concurrency level the profiler measured.

        ttft_s(n_in, load) = ttft_base_s + ttft_per_input(load) * n_in + ttft_load(load)
        tpot_s(load)       = tpot_base_s + tpot_load(load)
        latency_s          = ttft_s(n_in, load) + n_out * tpot_s(load)

    where a load term is interpolated between its values at `load_levels` (the per-load
    coefficient beyond the last), or, in a table without them, per-load coefficient x load;
    ttft_per_input(load) is `ttft_per_input_token_s` plus `ttft_per_input_load_s` interpolated
    the same way (held at the last level's beyond it; 0 in a table without it).

    All coefficients are non-negative (latency never improves with more load or tokens).
    """

    quantile: float = Field(gt=0.0, lt=1.0)
    ttft_base_s: NonNegFloat
    ttft_per_input_token_s: NonNegFloat
    ttft_per_load_s: NonNegFloat
    tpot_base_s: NonNegFloat
    tpot_per_load_s: NonNegFloat
    max_profiled_load: int = Field(ge=1, description="highest concurrency the profile measured")
    ttft_rmse_s: NonNegFloat = 0.0
    tpot_rmse_s: NonNegFloat = 0.0
    # The spread of one request's TTFT / TPOT around the line, as the standard deviation
    # of its logarithm at one load level: ln(p95 / p50) / 1.645 of the profile's samples
    # (their mean over the levels). It turns a prediction into a chance of meeting a budget
    # (docs/data_plane.md, "Best effort"); 0 = not measured (tables before it): the
    # prediction is then taken as exact. Scale-free, so a refit that scales the line keeps it.
    ttft_log_spread: NonNegFloat = 0.0
    tpot_log_spread: NonNegFloat = 0.0
    # The load terms measured at each profiled level (docs/control_plane.md "Latency model"):
    # with them, the load term at a load is interpolated between the levels around it (the
    # per-load coefficient beyond the last), in place of per-load x load.
    load_levels: tuple[int, ...] | None = None
    ttft_load_s: tuple[NonNegFloat, ...] | None = None
    tpot_load_s: tuple[NonNegFloat, ...] | None = None
    # Per profiled level too (docs/control_plane.md "Latency model"): the TTFT seconds per
    # input token above `ttft_per_input_token_s` (a prompt waits for the prompts queued ahead
    # of it), and the RMSE of the fit's residuals at that level, which the data plane adds
    # (x z_q) at that load in place of the pooled `ttft_rmse_s` / `tpot_rmse_s`.
    ttft_per_input_load_s: tuple[NonNegFloat, ...] | None = None
    ttft_rmse_load_s: tuple[NonNegFloat, ...] | None = None
    tpot_rmse_load_s: tuple[NonNegFloat, ...] | None = None

    @model_validator(mode="after")
    def _levels(self) -> LatencyModel:
        found = (self.load_levels, self.ttft_load_s, self.tpot_load_s)
        if any(f is not None for f in found):
            if any(f is None for f in found) or len({len(f or ()) for f in found}) != 1:
                raise ValueError("load_levels, ttft_load_s and tpot_load_s go together")
            levels = self.load_levels or ()
            if not levels or list(levels) != sorted(set(levels)) or levels[0] < 1:
                raise ValueError("load_levels must be increasing loads >= 1")
        per_level = (self.ttft_per_input_load_s, self.ttft_rmse_load_s, self.tpot_rmse_load_s)
        for terms in per_level:
            if terms is not None and len(terms) != len(self.load_levels or ()):
                raise ValueError(
                    "ttft_per_input_load_s, ttft_rmse_load_s and tpot_rmse_load_s need "
                    "load_levels and one value per level"
                )
        return self

    def _held(self, load: float, terms: tuple[float, ...] | None) -> float:
        """`terms` at `load`: interpolated between the levels, held flat outside them."""
        return 0.0 if terms is None else self._load_term(load, terms, 0.0)

    def _load_term(self, load: float, terms: tuple[float, ...] | None, slope: float) -> float:
        levels = self.load_levels
        if levels is None or terms is None:
            return slope * load
        if load <= levels[0]:
            return terms[0]
        for (lo, a), (hi, b) in zip(
            zip(levels, terms, strict=True), zip(levels[1:], terms[1:], strict=True), strict=False
        ):
            if load <= hi:
                return a + (b - a) * (load - lo) / (hi - lo)
        return terms[-1] + slope * (load - levels[-1])

    def ttft_load_at(self, load: float) -> float:
        """TTFT's load term at `load` (seconds)."""
        return self._load_term(load, self.ttft_load_s, self.ttft_per_load_s)

    def tpot_load_at(self, load: float) -> float:
        """TPOT's load term at `load` (seconds per token)."""
        return self._load_term(load, self.tpot_load_s, self.tpot_per_load_s)

    def ttft_per_input_at(self, load: float) -> float:
        """TTFT seconds per input token at `load`."""
        return self.ttft_per_input_token_s + self._held(load, self.ttft_per_input_load_s)

    def ttft_rmse_at(self, load: float) -> float:
        """What the TTFT fit misses at `load`: its residuals' RMSE at the profiled levels
        (interpolated, held flat outside them), or the pooled `ttft_rmse_s` without them."""
        if self.ttft_rmse_load_s is None:
            return self.ttft_rmse_s
        return self._held(load, self.ttft_rmse_load_s)

    def tpot_rmse_at(self, load: float) -> float:
        """What the TPOT fit misses at `load` (as `ttft_rmse_at`)."""
        if self.tpot_rmse_load_s is None:
            return self.tpot_rmse_s
        return self._held(load, self.tpot_rmse_load_s)

    def ttft_s(self, input_tokens: int, load: float) -> float:
        return (
            self.ttft_base_s + self.ttft_per_input_at(load) * input_tokens + self.ttft_load_at(load)
        )

    def tpot_s(self, load: float) -> float:
        return self.tpot_base_s + self.tpot_load_at(load)

    def latency_s(self, input_tokens: int, output_tokens: int, load: float) -> float:
        return self.ttft_s(input_tokens, load) + output_tokens * self.tpot_s(load)


class EndpointEntry(_Contract):
    """One engine URL serving a pair. `id` (e.g. `fam@q#0`) is what metrics and logs show."""

    id: str = Field(min_length=1, max_length=200)
    url: HttpUrl


class PairEntry(_Contract):
    pair: str
    family: Family
    quantization: Quantization
    served_model_name: str = Field(min_length=1, max_length=200)
    endpoints: tuple[EndpointEntry, ...] = Field(min_length=1)
    context_length: int = Field(ge=16)
    chars_per_token: PosFloat
    json_chars_per_token: PosFloat | None = Field(
        default=None,
        description="the profile's characters per token of JSON schemas (tools, tool_calls, "
        "response_format); absent: JSON is priced at chars_per_token",
    )
    image_tokens: ImageTokens | None = Field(
        default=None,
        description="the profile's prompt tokens per image part; absent: an image part is "
        "priced at the default 576 tokens",
    )
    tokenizer: TokenizerRef | None = Field(
        default=None,
        description="the profile's tokenizer file (where it was read, its SHA-256); absent: "
        "prompts are priced at chars_per_token and json_chars_per_token",
    )
    input_usd_per_mtok: NonNegFloat
    output_usd_per_mtok: NonNegFloat
    price_source: Literal["explicit", "derived"]
    sustained_output_tokens_per_s: PosFloat
    latency: LatencyModel
    accuracy: dict[Category, Ratio]
    accuracy_n: dict[Category, int]
    utility: dict[Category, FiniteFloat]
    precision_rank: int = Field(ge=0, description="0 = the most precise pair of its family")
    reference_cost_usd: NonNegFloat = Field(description="cost of the policy's reference request")
    # Accuracy as a measurement (docs/accuracy.md). `accuracy_right` / `accuracy_n`
    # are the counts; `accuracy_bound` is what floors are compared with: the one-sided lower
    # bound at the policy's floor_confidence, capped by the family's more precise pairs, and
    # 0.0 below min_eval_items. Tables without it (older builders) route on `accuracy`.
    accuracy_right: dict[Category, NonNegInt] = Field(default_factory=dict)
    accuracy_bound: dict[Category, Ratio] = Field(default_factory=dict)
    precision_format: str | None = Field(
        default=None, max_length=8, description="declared format behind precision_rank"
    )

    @model_validator(mode="after")
    def _consistent(self) -> PairEntry:
        if self.pair != pair_name(self.family, self.quantization):
            raise ValueError(f"pair {self.pair!r} does not match family@quantization")
        if set(self.accuracy) != set(self.accuracy_n):
            raise ValueError("accuracy and accuracy_n must cover the same categories")
        if len({e.id for e in self.endpoints}) != len(self.endpoints):
            raise ValueError("endpoint ids must be unique")
        _check_measurement(self)
        return self

    def cost_usd(self, input_tokens: int, output_tokens: int) -> float:
        return (
            input_tokens * self.input_usd_per_mtok + output_tokens * self.output_usd_per_mtok
        ) / 1_000_000


def _check_measurement(entry: PairEntry) -> None:
    """Counts and bounds describe measured categories, and a bound never exceeds the
    point estimate (that would be over-confident)."""
    measured = set(entry.accuracy)
    if not set(entry.accuracy_right) <= measured or not set(entry.accuracy_bound) <= measured:
        raise ValueError("accuracy_right and accuracy_bound may name only measured categories")
    for category, right in entry.accuracy_right.items():
        if right > entry.accuracy_n[category]:
            raise ValueError(f"accuracy_right[{category}] exceeds accuracy_n")
    for category, bound in entry.accuracy_bound.items():
        if bound > entry.accuracy[category] + 1e-9:
            raise ValueError(f"accuracy_bound[{category}] exceeds accuracy")


class PrunedPair(_Contract):
    pair: str
    dominated_by: str


class SourceReport(_Contract):
    pair: str
    report_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    partial: bool = False


class PairRefit(_Contract):
    """How live traffic corrected one pair's latency lines in a refit table."""

    samples: int = Field(ge=0)
    observed_e2e_ratio: PosFloat = Field(description="observed / predicted at the quantile")
    ttft_factor: PosFloat = Field(description="TTFT coefficients were multiplied by this")
    tpot_factor: PosFloat = Field(description="TPOT coefficients were multiplied by this")


class RefitProvenance(_Contract):
    """Why a table is not a plain build from profiles: latency refit from live traffic."""

    note: str = Field(max_length=500, description="refit from live traffic: N samples over W min")
    base_version: int = Field(ge=1, description="the table whose predictions were observed")
    samples: int = Field(ge=0)
    window_s: PosFloat
    pairs: dict[str, PairRefit]
    # pair -> category -> the accuracy live agreement implies (set by an accuracy demotion)
    demoted: dict[str, dict[Category, Ratio]] = Field(default_factory=dict)
    # Set on a revert: the refit table this one undid (its predictions are the base's again).
    reverted_version: int | None = Field(default=None, ge=1)
    # pair -> how much slower than its profile the refits so far made it (product of the e2e
    # factors, kept while above 1): data planes probe these pairs so they can come back.
    slowed: dict[str, PosFloat] = Field(default_factory=dict)


class Demotion(_Contract):
    """An accuracy demotion in force (docs/accuracy.md "Canary items"): the entry's accuracy
    and bound in this category were lowered from the profile's values kept here, on the
    canary items counted here. Lifted when fresh items score at or above the profile's
    bound; a rebuild from profiles carries it onto the new build."""

    profile_accuracy: Ratio
    profile_bound: Ratio | None = Field(description="None: the entry had no bounds")
    checks: int = Field(ge=1, description="canary items scored (n)")
    agreed: int = Field(ge=0, description="of them, right")
    base_version: int = Field(ge=1, description="the table the checks were about")


class RoutingTable(_Contract):
    schema_version: str = Field(default=SCHEMA_VERSION, pattern=r"^\d+\.\d+$")
    kind: Literal["RoutingTable"] = "RoutingTable"
    version: int = Field(ge=0, description="0 until published; then the Redis sequence number")
    content_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    created_at: datetime
    policy: Policy
    entries: tuple[PairEntry, ...] = Field(min_length=1)
    baselines: dict[Family, str]
    categories: tuple[Category, ...] = Field(min_length=1)
    pruned: tuple[PrunedPair, ...] = ()
    sources: tuple[SourceReport, ...] = ()
    classifier: CategoryModel | None = Field(
        default=None,
        description="the category classifier trained on the reports' eval prompts; None: "
        "data planes use their built-in model",
    )
    refit: RefitProvenance | None = None  # set only on tables refit from latency feedback
    demotions: dict[str, dict[Category, Demotion]] = Field(
        default_factory=dict, description="pair -> category -> the accuracy demotion in force"
    )
    fleet_baseline: str | None = Field(
        default=None,
        description="the most precise pair of the most accurate family (fleet-wide savings)",
    )

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> RoutingTable:
        major = self.schema_version.split(".")[0]
        if major != SCHEMA_VERSION.split(".")[0]:
            raise ValueError(
                f"schema_version {self.schema_version} is not compatible with {SCHEMA_VERSION}"
            )
        pairs = [e.pair for e in self.entries]
        if len(set(pairs)) != len(pairs):
            raise ValueError("entries list a pair more than once")
        keys = [(e.reference_cost_usd, e.pair) for e in self.entries]
        if keys != sorted(keys, key=lambda k: k[0]):
            raise ValueError("entries must be ordered by reference_cost_usd")
        for family, pair in self.baselines.items():
            if pair not in pairs:
                raise ValueError(f"baseline {pair!r} of {family!r} is not an entry")
        if self.fleet_baseline is not None and self.fleet_baseline not in pairs:
            raise ValueError(f"fleet_baseline {self.fleet_baseline!r} is not an entry")
        stamping = isinstance(info.context, dict) and info.context.get("stamping") is True
        if not stamping and self.content_sha256 not in accepted_content_sha256(self):
            raise ValueError("content_sha256 does not match the table's content")
        return self

    def entry(self, pair: str) -> PairEntry | None:
        for e in self.entries:
            if e.pair == pair:
                return e
        return None


_VOLATILE = {"version", "created_at", "content_sha256"}


def canonical_json(data: Any) -> str:
    """The one serialisation hashes are taken over: sorted keys, no whitespace."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# Refit policy fields added after the refit policy itself: each is left out of the hash at
# its default first, so a refit policy written before them hashes as it did.
_REFIT_ADDED: dict[str, Any] = {
    name: value
    for name, value in RefitPolicy().model_dump(mode="json").items()
    if name
    in (
        "outlier_share",
        "min_cell_samples",
        "consensus_share",
        "max_client_share",
        "watch_min_samples",
        "revert_drop_ratio",
        "revert_hold_s",
    )
}
_REFIT_1_0 = {
    k: v for k, v in RefitPolicy().model_dump(mode="json").items() if k not in _REFIT_ADDED
}

# Fields added after schema 1.0, with their defaults (as JSON). A field holding its default is
# left out of the hash, so a table written before the field existed keeps its hash when a newer
# reader fills the default in ("writers can add fields first"); a set value is hashed.
_ADDED_DEFAULTS: tuple[tuple[tuple[str, ...], Any], ...] = (
    (("refit",), None),
    (("refit", "reverted_version"), None),
    (("refit", "slowed"), {}),
    (("policy", "objective"), "cost"),
    (("policy", "ladder_hysteresis_ratio"), 0.1),
    *((("policy", "refit", name), value) for name, value in _REFIT_ADDED.items()),
    (("policy", "refit"), _REFIT_1_0),
    (("policy", "accuracy_check"), AccuracyCheckPolicy().model_dump(mode="json")),
    (("classifier",), None),
    (("policy", "category_confidence"), 0.6),
    (("policy", "doubt_category"), None),
    (("policy", "floor_confidence"), DEFAULT_FLOOR_CONFIDENCE),
    (("policy", "min_eval_items"), DEFAULT_MIN_EVAL_ITEMS),
    (("policy", "precision_formats"), {}),
    (("fleet_baseline",), None),
    (("demotions",), {}),
    (("policy", "accuracy_check", "max_usd_per_hour"), 1.0),
    (("policy", "accuracy_check", "max_tokens"), 256),
    (("policy", "accuracy_check", "confidence"), 0.99),
    (("policy", "accuracy_check", "max_input_tokens"), 2048),
    (("policy", "accuracy_check", "canary_looks"), 20),
)
# The same for fields added to each entry, and to its latency model.
_ADDED_ENTRY_DEFAULTS: tuple[tuple[str, Any], ...] = (
    ("accuracy_right", {}),
    ("accuracy_bound", {}),
    ("precision_format", None),
    ("image_tokens", None),
    ("tokenizer", None),
)
_ADDED_TOKENIZER = ("template", "special_tokens")
_ADDED_LATENCY_DEFAULTS = {
    name: None
    for name in (
        "load_levels",
        "ttft_load_s",
        "tpot_load_s",
        "ttft_per_input_load_s",
        "ttft_rmse_load_s",
        "tpot_rmse_load_s",
    )
}


def _entry_without_added_defaults(entry: Any) -> Any:
    if not isinstance(entry, dict):
        return entry
    kept = {
        k: v
        for k, v in entry.items()
        if not any(k == name and v == default for name, default in _ADDED_ENTRY_DEFAULTS)
    }
    tokenizer = kept.get("tokenizer")
    if isinstance(tokenizer, dict):  # fields added to the tokenizer, left out when absent
        kept["tokenizer"] = tokenizer = {
            k: v for k, v in tokenizer.items() if not (k in _ADDED_TOKENIZER and v is None)
        }
        template = tokenizer.get("template")
        if isinstance(template, dict) and template.get("trims") is False:  # added
            tokenizer["template"] = {k: v for k, v in template.items() if k != "trims"}
    latency = kept.get("latency")
    if isinstance(latency, dict):
        kept["latency"] = {
            k: v
            for k, v in latency.items()
            if not (k in _ADDED_LATENCY_DEFAULTS and v == _ADDED_LATENCY_DEFAULTS[k])
        }
    return kept


def _without_added_defaults(data: dict[str, Any]) -> dict[str, Any]:
    entries = data.get("entries")
    if isinstance(entries, list):
        data["entries"] = [_entry_without_added_defaults(e) for e in entries]
    for path, default in _ADDED_DEFAULTS:
        parent: Any = data
        for key in path[:-1]:
            parent = parent.get(key) if isinstance(parent, dict) else None
        if isinstance(parent, dict) and path[-1] in parent and parent[path[-1]] == default:
            _delete_copied(data, path)
    return data


def _delete_copied(data: dict[str, Any], path: tuple[str, ...]) -> None:
    """Delete `path` from `data`, copying each dict on the way (the caller's stay intact)."""
    parent = data
    for key in path[:-1]:
        parent[key] = dict(parent[key])
        parent = parent[key]
    del parent[path[-1]]


def content_payload(table: RoutingTable | dict[str, Any]) -> dict[str, Any]:
    data = table.model_dump(mode="json") if isinstance(table, RoutingTable) else dict(table)
    # Readers of a newer schema may hold fields this version does not know; the hash covers
    # the fields known here, so a reader re-checks exactly what it validated.
    return _without_added_defaults({k: v for k, v in data.items() if k not in _VOLATILE})


# Entry fields added without a place in _ADDED_ENTRY_DEFAULTS: tables were written both
# without them (before) and with them null (since), so a reader accepts either hash.
_ADDED_BOTH_WAYS = ("json_chars_per_token",)  # 6a74426


def accepted_content_sha256(table: RoutingTable) -> tuple[str, ...]:
    """The content hashes a reader accepts for `table`: today's, and the one a writer from
    before an entry field of _ADDED_BOTH_WAYS took over the same content without it."""
    payload = content_payload(table)
    entries = payload.get("entries")
    if not isinstance(entries, list):
        return (compute_content_sha256(table),)
    older = [
        {k: v for k, v in e.items() if not (k in _ADDED_BOTH_WAYS and v is None)}
        if isinstance(e, dict)
        else e
        for e in entries
    ]
    hashes = (canonical_json(payload), canonical_json({**payload, "entries": older}))
    return tuple(dict.fromkeys(hashlib.sha256(h.encode()).hexdigest() for h in hashes))


def compute_content_sha256(table: RoutingTable | dict[str, Any]) -> str:
    """Hash of everything but version, creation time and the hash itself.

    Two builds from the same reports and policy have the same hash, whenever they ran.
    """
    return hashlib.sha256(canonical_json(content_payload(table)).encode()).hexdigest()


def stamp_table(data: dict[str, Any]) -> RoutingTable:
    """Validate a table built as plain data and fill in its content hash.

    The hash is taken over the validated model's JSON, so it is the one readers recompute.
    """
    data = {**data, "content_sha256": "0" * 64}
    draft = RoutingTable.model_validate(data, context={"stamping": True})
    return draft.model_copy(update={"content_sha256": compute_content_sha256(draft)})


def with_version(table: RoutingTable, version: int) -> RoutingTable:
    """The same table stamped with a published version (content hash unchanged)."""
    if version < 1:
        raise ValueError("published versions start at 1")
    return table.model_copy(update={"version": version})
