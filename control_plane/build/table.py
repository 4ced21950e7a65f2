"""`build_table`: ProfileReports + Policy -> RoutingTable (version 0), deterministically.

PURE: no clock, I/O or logging; problems come back as `BuildError`, notes as warnings.
Steps: reject bad input (partial provenance, two different reports for one pair, policy naming
unknown pairs), fit latency models (`fitting`), price pairs (`pricing`), rank precision within
each family (`precision`), pick baselines, drop dominated pairs and score utility (`scoring`),
order entries by the reference request's cost, and stamp the content hash. The accuracy
bound every entry routes on comes from `floor_bounds` (docs/accuracy.md); precision comes from
the declared format, never from measured accuracy.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from contracts.names import split_pair
from contracts.policy import Policy
from contracts.profile_report import ProfileReport
from contracts.routing_table import LatencyModel, RoutingTable, canonical_json, stamp_table
from control_plane.build.category_training import classifier_for
from control_plane.build.fitting import fit_latency_model, round_sig
from control_plane.build.floor_bounds import Measurement, floor_bounds
from control_plane.build.precision import declared_format, format_problem, precision_ranks
from control_plane.build.pricing import PairPrices, price_pair
from control_plane.build.scoring import PairFigures, Pruning, prune_dominated, utility_scores


class BuildError(ValueError):
    """The inputs cannot make a table; `problems` holds one 'where: what' line per problem."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("cannot build the routing table: " + "; ".join(problems))
        self.problems = list(problems)


@dataclass(frozen=True, slots=True)
class TableBuild:
    table: RoutingTable
    warnings: tuple[str, ...]


def report_sha256(report: ProfileReport) -> str:
    """Hash of a report's canonical JSON (the fields this version knows)."""
    return hashlib.sha256(canonical_json(report.model_dump(mode="json")).encode()).hexdigest()


def _unique_reports(reports: Sequence[ProfileReport]) -> tuple[list[ProfileReport], list[str]]:
    """One report per pair, sorted by pair; identical duplicates merge, different ones fail."""
    by_pair: dict[str, dict[str, ProfileReport]] = {}
    for report in reports:
        by_pair.setdefault(report.pair, {})[report_sha256(report)] = report
    problems = [
        f"report {pair}: {len(versions)} different reports for one pair "
        f"(report_sha256 {', '.join(h[:12] for h in sorted(versions))}); keep one"
        for pair, versions in sorted(by_pair.items())
        if len(versions) > 1
    ]
    unique = [min(versions.items())[1] for _, versions in sorted(by_pair.items())]
    return unique, problems


def _partial_problems(reports: Sequence[ProfileReport], allow_partial: bool) -> list[str]:
    if allow_partial:
        return []
    return [
        f"report {r.pair}: provenance.partial: the profiling run was interrupted; "
        "re-profile the pair or allow partial reports explicitly"
        for r in reports
        if r.provenance.partial
    ]


def _policy_problems(policy: Policy, family_of: Mapping[str, str]) -> list[str]:
    problems = []
    shadow_pair = policy.shadow.default_pair
    if shadow_pair is not None and shadow_pair not in family_of:
        problems.append(f"policy: shadow.default_pair: {shadow_pair!r} is not a profiled pair")
    for family, pair in sorted(policy.baselines.items()):
        if pair not in family_of:
            problems.append(f"policy: baselines.{family}: {pair!r} is not a profiled pair")
        elif family_of[pair] != family:
            problems.append(
                f"policy: baselines.{family}: {pair!r} belongs to family {family_of[pair]!r}"
            )
    return problems


def _category_warnings(reports: Sequence[ProfileReport], categories: Sequence[str]) -> list[str]:
    measured = {r.pair: {a.category for a in r.accuracy} for r in reports}
    warnings = []
    for category in categories:
        missing = [pair for pair, cats in measured.items() if category not in cats]
        if len(missing) == len(measured):
            warnings.append(f"category {category!r}: no pair measured it; all count as accuracy 0")
        elif missing:
            warnings.append(
                f"category {category!r}: not measured by {', '.join(missing)}; "
                "they count as accuracy 0 there"
            )
    extra = sorted(set().union(*measured.values()) - set(categories))
    warnings += [f"category {c!r}: measured but not in the policy; not routed on" for c in extra]
    return warnings


def _format_problems(reports: Sequence[ProfileReport], policy: Policy) -> list[str]:
    """A pair whose quantization name declares no single weight format cannot be ordered by
    precision (it used to rank as 0 bits, below every other pair)."""
    problems = []
    for r in reports:
        why = format_problem(r.quantization, policy.precision_formats)
        if why is not None:
            problems.append(
                f"pair {r.pair}: cannot read a weight format from the quantization name: {why}"
                ' (name it as in docs/control_plane.md, "Precision", or declare it in'
                " policy.precision_formats, e.g. fp6 or int5)"
            )
    return problems


def _figures(
    report: ProfileReport,
    prices: PairPrices,
    latency: LatencyModel,
    measured: Mapping[str, Measurement],
) -> PairFigures:
    return PairFigures(
        pair=report.pair,
        family=report.family,
        input_usd_per_mtok=prices.input_usd_per_mtok,
        output_usd_per_mtok=prices.output_usd_per_mtok,
        latency=latency,
        accuracy={a.category: a.accuracy for a in report.accuracy},
        context_length=report.context_length,
        bound={c: m.bound for c, m in measured.items()},
    )


def _precision_ranks(figures: Sequence[PairFigures], policy: Policy) -> dict[str, int]:
    """pair -> rank within its family by declared format, 0 = most precise (`precision`)."""
    by_family: dict[str, dict[str, str]] = {}
    for f in figures:
        by_family.setdefault(f.family, {})[f.pair] = split_pair(f.pair)[1]
    ranks: dict[str, int] = {}
    for members in by_family.values():
        ranks.update(precision_ranks(members, policy.precision_formats))
    return ranks


def _baselines(
    policy: Policy, figures: Sequence[PairFigures], ranks: Mapping[str, int]
) -> dict[str, str]:
    """family -> baseline pair: the policy's choice, else the family's most precise pair
    (on a tie in declared format, e.g. bf16 and fp16, the first by name)."""
    chosen: dict[str, str] = {}
    for f in sorted(figures, key=lambda f: f.pair):
        if ranks[f.pair] == 0:
            chosen.setdefault(f.family, f.pair)
    chosen.update(policy.baselines)
    return dict(sorted(chosen.items()))


def fleet_baseline(
    baselines: Mapping[str, str], figures: Sequence[PairFigures], categories: Sequence[str]
) -> str | None:
    """The baseline pair of the family whose baseline is the most accurate on average over
    the policy's categories (ties: the first by name): "everything on the fleet's best"."""
    by_pair = {f.pair: f for f in figures}
    scored = [
        (-by_pair[pair].mean_accuracy(categories), pair)
        for pair in baselines.values()
        if pair in by_pair
    ]
    return min(scored)[1] if scored else None


def _entry(
    report: ProfileReport, fig: PairFigures, prices: PairPrices, extra: Mapping[str, Any]
) -> dict[str, Any]:
    return {
        "pair": report.pair,
        "family": report.family,
        "quantization": report.quantization,
        "served_model_name": report.served_model_name,
        "endpoints": [
            {"id": f"{report.pair}#{i}", "url": url} for i, url in enumerate(report.endpoints)
        ],
        "context_length": report.context_length,
        "chars_per_token": report.chars_per_token,
        "json_chars_per_token": report.json_chars_per_token,
        "image_tokens": report.image_tokens,
        "tokenizer": None if report.tokenizer is None else report.tokenizer.model_dump(),
        "input_usd_per_mtok": prices.input_usd_per_mtok,
        "output_usd_per_mtok": prices.output_usd_per_mtok,
        "price_source": prices.source,
        "sustained_output_tokens_per_s": prices.sustained_output_tokens_per_s,
        "latency": fig.latency.model_dump(),
        "accuracy": {a.category: a.accuracy for a in report.accuracy},
        "accuracy_n": {a.category: a.n for a in report.accuracy},
        **extra,
        "accuracy_right": {a.category: a.right_count for a in report.accuracy},
        "accuracy_bound": dict(fig.bound),
    }


def build(
    reports: Sequence[ProfileReport],
    policy: Policy,
    created_at: datetime,
    *,
    allow_partial: bool = False,
    prune: bool = True,
) -> TableBuild:
    """The table and the build's warnings; raises BuildError naming every problem at once.

    Same reports (in any order) and policy give the same content hash. `created_at` must be
    timezone-aware. `prune=False` keeps dominated pairs (e.g. as overflow capacity).
    """
    if created_at.tzinfo is None:
        raise ValueError("created_at must be timezone-aware")
    if not reports:
        raise BuildError(["reports: no profile reports to build from"])
    unique, problems = _unique_reports(reports)
    problems += _partial_problems(unique, allow_partial)
    problems += _policy_problems(policy, {r.pair: r.family for r in unique})
    problems += _format_problems(unique, policy)
    if problems:
        raise BuildError(problems)
    categories = tuple(sorted(policy.categories))
    prices = {r.pair: price_pair(r) for r in unique}
    bounds = floor_bounds(unique, policy)
    figures = [
        _figures(
            r,
            prices[r.pair],
            fit_latency_model(r.latency, policy.latency_quantile),
            bounds[r.pair],
        )
        for r in unique
    ]
    baselines = _baselines(policy, figures, _precision_ranks(figures, policy))
    protected = set(baselines.values()) | {policy.shadow.default_pair or ""}
    pruning = (
        prune_dominated(figures, categories, protected)
        if prune
        else Pruning(kept=tuple(figures), pruned=())
    )
    entries = _scored_entries(unique, pruning.kept, prices, policy, categories)
    classifier, classifier_notes = classifier_for(unique, categories)
    table = stamp_table(
        {
            "version": 0,
            "created_at": created_at,
            "policy": policy,
            "entries": entries,
            "baselines": baselines,
            "categories": list(categories),
            "pruned": [{"pair": p, "dominated_by": by} for p, by in pruning.pruned],
            "sources": [
                {"pair": r.pair, "report_sha256": report_sha256(r), "partial": r.provenance.partial}
                for r in unique
            ],
            "classifier": classifier,
            "fleet_baseline": fleet_baseline(baselines, figures, categories),
        }
    )
    warnings = _category_warnings(unique, categories)
    warnings += classifier_notes
    return TableBuild(table=table, warnings=tuple(warnings))


def _scored_entries(
    reports: Sequence[ProfileReport],
    kept: Sequence[PairFigures],
    prices: Mapping[str, PairPrices],
    policy: Policy,
    categories: Sequence[str],
) -> list[dict[str, Any]]:
    """Entries of the kept pairs, ordered by (reference cost, reference latency, pair)."""
    report_of = {r.pair: r for r in reports}
    ranks = _precision_ranks(kept, policy)
    utility = utility_scores(kept, policy, categories)
    n_in, n_out = policy.reference_input_tokens, policy.reference_output_tokens
    keyed = []
    for fig in kept:
        cost = round_sig(fig.cost_usd(n_in, n_out))
        extra = {
            "utility": {c: round_sig(u) for c, u in utility[fig.pair].items()},
            "precision_rank": ranks[fig.pair],
            "precision_format": declared_format(split_pair(fig.pair)[1], policy.precision_formats),
            "reference_cost_usd": cost,
        }
        entry = _entry(report_of[fig.pair], fig, prices[fig.pair], extra)
        keyed.append(((cost, fig.latency.latency_s(n_in, n_out, 1), fig.pair), entry))
    return [entry for _, entry in sorted(keyed, key=lambda item: item[0])]


def build_table(
    reports: Sequence[ProfileReport],
    policy: Policy,
    created_at: datetime,
    *,
    allow_partial: bool = False,
    prune: bool = True,
) -> RoutingTable:
    """`build(...).table`: the routing table alone (see `build`)."""
    return build(reports, policy, created_at, allow_partial=allow_partial, prune=prune).table
