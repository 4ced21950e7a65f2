"""RoutingTable (wire contract) -> CompiledTable (flat, frozen, indexed for the hot path).

PURE: runs once per table version, never per request. Everything `choose_route` would
otherwise look up or convert per request (prices per token, alias lists, category defaults,
the next more precise pair, best effort's accuracy tails) is computed here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from statistics import NormalDist
from types import MappingProxyType

from contracts.policy import CategoryPolicy
from contracts.routing_table import LatencyModel, PairEntry, RoutingTable
from data_plane.decision.chance import accuracy_tails
from data_plane.decision.ladder import ladder_ranks
from data_plane.domain import (
    AliasTokenizer,
    BudgetMode,
    CategoryDefaults,
    CompiledEndpoint,
    CompiledPair,
    CompiledTable,
    CostFloor,
    ScanRow,
    load_steps,
)
from data_plane.request.category import BUILTIN, compile_classifier
from data_plane.request.prompt_size import IMAGE_CHARS, IMAGE_TOKENS

AUTO_ALIAS = "auto"
_PER_TOKEN = 1e-6  # prices in the table are per million tokens
MAX_CONTEXTS = 2  # a prompt's token count reads at most this many contexts' characters


def _z(latency: LatencyModel) -> float:
    return max(0.0, NormalDist().inv_cdf(latency.quantile))


def widened_intercepts(latency: LatencyModel) -> tuple[float, float]:
    """(TTFT, TPOT) intercepts widened by the fit's pooled error at the table's quantile q, for
    a table without the error per level (`LatencyModel.ttft_rmse_load_s`; with it, the
    widening is in the load terms, `widened_load_terms`). The model runs through the measured
    q-quantiles level by level and its residual RMSE is what it misses within a level, so
    z_q x RMSE is added (z_0.95 = 1.645; z_0.5 = 0, no widening). See docs/data_plane.md
    "Predictions"."""
    if latency.ttft_rmse_load_s is not None:
        return latency.ttft_base_s, latency.tpot_base_s
    z = _z(latency)
    return (
        latency.ttft_base_s + z * latency.ttft_rmse_s,
        latency.tpot_base_s + z * latency.tpot_rmse_s,
    )


def widened_load_terms(
    latency: LatencyModel,
) -> tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]]:
    """(TTFT, TPOT load terms, TTFT's extra seconds per input token) at loads 0, 1, ...,
    max_profiled_load, for `domain.load_terms`: a load term plus z_q x the fit's error at that
    load when the table has it per level (`widened_intercepts` otherwise), so a prediction at
    load 1 is widened by what the fit misses at load 1, not by the queueing at the highest
    level."""
    loads = range(latency.max_profiled_load + 1)
    z = _z(latency) if latency.ttft_rmse_load_s is not None else 0.0
    ttft = tuple(latency.ttft_load_at(n) + z * latency.ttft_rmse_at(n) for n in loads)
    tpot = tuple(latency.tpot_load_at(n) + z * latency.tpot_rmse_at(n) for n in loads)
    base = latency.ttft_per_input_token_s
    per_input = tuple(latency.ttft_per_input_at(n) - base for n in loads)
    return ttft, tpot, per_input


def routing_accuracy(entry: PairEntry) -> dict[str, float]:
    """category -> the number floors are compared with: the table's bound; a table built
    without bounds (an older control plane) routes on its point estimates, as it did."""
    return dict(entry.accuracy_bound) if entry.accuracy_bound else dict(entry.accuracy)


def floor_basis(entry: PairEntry, confidence: float, min_items: int) -> dict[str, str]:
    """category -> the words a below-floor rejection quotes (docs/accuracy.md)."""
    if not entry.accuracy_bound:
        return {}
    words = {}
    for category, accuracy in entry.accuracy.items():
        n = entry.accuracy_n[category]
        right = entry.accuracy_right.get(category, round(accuracy * n))
        if n < min_items:
            words[category] = (
                f"on {category}: accuracy unknown, {right}/{n} eval items "
                f"(fewer than min_eval_items {min_items})"
            )
        else:
            bound = entry.accuracy_bound.get(category, 0.0)
            words[category] = (
                f"at {confidence:.0%} confidence on {category}: {right}/{n} = {accuracy:.2f}, "
                f"lower bound {bound:.3f}"
            )
    return words


def compile_pair(
    entry: PairEntry,
    order: int,
    ladder_rank: int = 0,
    confidence: float = 0.9,
    min_items: int = 1,
    tails: Mapping[str, Sequence[float]] | None = None,
) -> CompiledPair:
    """One table entry flattened; `order` is its position in the table's cost order,
    `ladder_rank` its rung on the precision ladder (`ladder.ladder_ranks`); `confidence` and
    `min_items` are the policy's, for the words of a floor rejection; `tails` its accuracy
    tails (`chance.accuracy_tails`, which caps them by the family; the pair's own
    posteriors when not given)."""
    latency = entry.latency
    ttft_base_s, tpot_base_s = widened_intercepts(latency)
    ttft_by_load, tpot_by_load, per_input_by_load = widened_load_terms(latency)
    if tails is None:
        tails = accuracy_tails([entry], min_items)[entry.pair]
    return CompiledPair(
        pair=entry.pair,
        family=entry.family,
        quantization=entry.quantization,
        served_model_name=entry.served_model_name,
        endpoints=tuple(CompiledEndpoint(id=e.id, url=e.url) for e in entry.endpoints),
        context_length=entry.context_length,
        chars_per_token=entry.chars_per_token,
        input_usd_per_token=entry.input_usd_per_mtok * _PER_TOKEN,
        output_usd_per_token=entry.output_usd_per_mtok * _PER_TOKEN,
        ttft_base_s=ttft_base_s,
        ttft_per_input_token_s=latency.ttft_per_input_token_s,
        ttft_per_load_s=latency.ttft_per_load_s,
        tpot_base_s=tpot_base_s,
        tpot_per_load_s=latency.tpot_per_load_s,
        accuracy=MappingProxyType(dict(entry.accuracy)),
        precision_rank=entry.precision_rank,
        order=order,
        max_profiled_load=float(latency.max_profiled_load),
        sustained_output_tokens_per_s=entry.sustained_output_tokens_per_s,
        ladder_rank=ladder_rank,
        accuracy_bound=MappingProxyType(routing_accuracy(entry)),
        floor_basis=MappingProxyType(floor_basis(entry, confidence, min_items)),
        accuracy_tail=MappingProxyType(dict(tails)),
        ttft_log_spread=latency.ttft_log_spread,
        tpot_log_spread=latency.tpot_log_spread,
        latency_z=NormalDist().inv_cdf(latency.quantile),
        ttft_by_load=ttft_by_load,
        tpot_by_load=tpot_by_load,
        ttft_per_input_by_load=per_input_by_load,
    )


def _by_alias(pairs: tuple[CompiledPair, ...]) -> dict[str, tuple[CompiledPair, ...]]:
    """'auto' -> every pair; family -> its pairs; pair name -> itself; all in cost order.

    A family literally named 'auto' would be shadowed by the 'auto' alias (it still has its
    pair names).
    """
    families: dict[str, list[CompiledPair]] = {}
    for p in pairs:
        families.setdefault(p.family, []).append(p)
    aliases: dict[str, tuple[CompiledPair, ...]] = {f: tuple(ps) for f, ps in families.items()}
    aliases.update({p.pair: (p,) for p in pairs})
    aliases[AUTO_ALIAS] = pairs
    return aliases


def _more_precise(pairs: tuple[CompiledPair, ...]) -> dict[str, CompiledPair]:
    """pair -> the pair of the same family with the next lower precision_rank (if any)."""
    result: dict[str, CompiledPair] = {}
    for p in pairs:
        better = [q for q in pairs if q.family == p.family and q.precision_rank < p.precision_rank]
        if better:
            # Closest rank above; on equal ranks the cheaper (earlier) pair.
            result[p.pair] = min(better, key=lambda q: (-q.precision_rank, q.order))
    return result


def _demoted(
    table: RoutingTable, pairs: tuple[CompiledPair, ...]
) -> dict[str, tuple[CompiledPair, ...]]:
    """Category -> the pairs demoted in it (`table.demotions`), in cost order."""
    found: dict[str, tuple[CompiledPair, ...]] = {}
    for category in {c for kept in table.demotions.values() for c in kept}:
        found[category] = tuple(p for p in pairs if category in table.demotions.get(p.pair, {}))
    return found


def _baselines(table: RoutingTable, by_name: Mapping[str, CompiledPair]) -> dict[str, CompiledPair]:
    """family -> baseline pair: the table's choice, else the family's most precise pair."""
    result: dict[str, CompiledPair] = {}
    for p in by_name.values():
        named = table.baselines.get(p.family)
        if named is not None:
            result[p.family] = by_name[named]
        elif p.family not in result or (p.precision_rank, p.order) < (
            result[p.family].precision_rank,
            result[p.family].order,
        ):
            result[p.family] = p
    return result


def _category_defaults(table: RoutingTable) -> dict[str, CategoryDefaults]:
    """Policy defaults for every category the policy or the table names."""
    policies = dict(table.policy.categories)
    for name in table.categories:
        policies.setdefault(name, CategoryPolicy())
    return {
        name: CategoryDefaults(
            min_accuracy=cp.min_accuracy,
            latency_budget_s=cp.latency_budget_s,
            ttft_budget_s=cp.ttft_budget_s,
            typical_output_tokens=cp.typical_output_tokens,
        )
        for name, cp in policies.items()
    }


def scan_row(p: CompiledPair) -> ScanRow:
    """The flat tuple `choose_route` unpacks for `p`."""
    return ScanRow(
        order=p.order,
        pair=p,
        endpoints=p.endpoints,
        endpoint_ids=tuple(e.id for e in p.endpoints),
        swapped=p.endpoints[::-1],
        chars_per_token=p.chars_per_token,
        context_length=p.context_length,
        input_usd_per_token=p.input_usd_per_token,
        output_usd_per_token=p.output_usd_per_token,
        ttft_base_s=p.ttft_base_s,
        ttft_per_input_token_s=p.ttft_per_input_token_s,
        ttft_per_load_s=p.ttft_per_load_s,
        tpot_base_s=p.tpot_base_s,
        tpot_per_load_s=p.tpot_per_load_s,
        max_profiled_load=p.max_profiled_load,
        load_steps=load_steps(p),
    )


def cost_floors(rows: tuple[ScanRow, ...]) -> tuple[CostFloor, ...]:
    """For each position, the cost floor of the rows from there to the end (suffix extremes),
    and the next position where that floor changes."""
    floors: list[CostFloor] = []
    cpt, in_usd, out_usd = 0.0, math.inf, math.inf
    change = len(rows)
    for k in range(len(rows) - 1, -1, -1):
        row = rows[k]
        was = (cpt, in_usd, out_usd)
        cpt = max(cpt, row.chars_per_token)
        in_usd = min(in_usd, row.input_usd_per_token)
        out_usd = min(out_usd, row.output_usd_per_token)
        if floors and (cpt, in_usd, out_usd) != was:
            change = k + 1
        floors.append(CostFloor(cpt, in_usd, out_usd, change))
    return tuple(reversed(floors))


def compile_table(table: RoutingTable) -> CompiledTable:
    """Flatten a validated RoutingTable; keeps the table's cost order as each pair's `order`."""
    declared = {e.quantization: e.precision_format for e in table.entries}
    rungs = ladder_ranks(declared, declared)
    policy = table.policy
    confidence, min_items = policy.floor_confidence, policy.min_eval_items
    tails = accuracy_tails(table.entries, min_items)
    pairs = tuple(
        compile_pair(e, i, rungs[e.quantization], confidence, min_items, tails[e.pair])
        for i, e in enumerate(table.entries)
    )
    by_name = {p.pair: p for p in pairs}
    by_alias = _by_alias(pairs)
    rows = tuple(scan_row(p) for p in pairs)
    alias_rows = {alias: tuple(rows[p.order] for p in ps) for alias, ps in by_alias.items()}
    categories = _category_defaults(table)
    return CompiledTable(
        version=table.version,
        content_sha256=table.content_sha256,
        pairs=pairs,
        by_alias=MappingProxyType(by_alias),
        categories=MappingProxyType(categories),
        default_category=table.policy.default_category,
        default_mode=BudgetMode(table.policy.budget_mode),
        baselines=MappingProxyType(_baselines(table, by_name)),
        more_precise=MappingProxyType(_more_precise(pairs)),
        policy=table.policy,
        scan_rows=MappingProxyType(alias_rows),
        cost_floors=MappingProxyType({a: cost_floors(r) for a, r in alias_rows.items()}),
        accuracy_by_category=MappingProxyType(
            {c: tuple(p.accuracy_bound.get(c, 0.0) for p in pairs) for c in categories}
        ),
        classifier=BUILTIN if table.classifier is None else compile_classifier(table.classifier),
        fleet_baseline=by_name.get(table.fleet_baseline or ""),
        slowed_pairs=tuple(
            by_name[p] for p in (table.refit.slowed if table.refit else {}) if p in by_name
        ),
        demoted=MappingProxyType(_demoted(table, pairs)),
        json_weight=MappingProxyType(json_weights(table.entries, by_alias)),
        image_chars=MappingProxyType(image_chars(table.entries, by_alias)),
        tokenizers=MappingProxyType(alias_tokenizers(table.entries, by_alias)),
    )


def json_weights(
    entries: Sequence[PairEntry], by_alias: Mapping[str, tuple[CompiledPair, ...]]
) -> dict[str, float]:
    """alias -> the weight of one JSON character in `input_chars`, so that a pair dividing
    it by its chars_per_token counts JSON at its family's measured json_chars_per_token: the
    largest chars_per_token / json_chars_per_token among the alias's pairs (an over-estimate
    for the others; 1.0 for a pair without the figure). Aliases of weight 1.0 are left out."""
    own = {
        e.pair: e.chars_per_token / e.json_chars_per_token
        for e in entries
        if e.json_chars_per_token is not None
    }
    weights = {alias: max(own.get(p.pair, 1.0) for p in ps) for alias, ps in by_alias.items()}
    return {alias: w for alias, w in weights.items() if w != 1.0}


def image_chars(
    entries: Sequence[PairEntry], by_alias: Mapping[str, tuple[CompiledPair, ...]]
) -> dict[str, int]:
    """alias -> the characters one image part counts as in `input_chars`, so that a pair
    dividing them by its chars_per_token counts the model's own tokens per image: the largest
    image_tokens x chars_per_token among the alias's pairs, rounded up (IMAGE_TOKENS for a pair
    without the figure; an over-estimate for the others). Aliases at IMAGE_CHARS, what the
    parsed body already counts, are left out."""
    own = {e.pair: math.ceil((e.image_tokens or IMAGE_TOKENS) * e.chars_per_token) for e in entries}
    chars = {alias: max(own.get(p.pair, IMAGE_CHARS) for p in ps) for alias, ps in by_alias.items()}
    return {alias: c for alias, c in chars.items() if c != IMAGE_CHARS}


def alias_tokenizers(
    entries: Sequence[PairEntry], by_alias: Mapping[str, tuple[CompiledPair, ...]]
) -> dict[str, AliasTokenizer]:
    """alias -> the tokenizer file all its pairs name (one SHA-256), with the characters a
    counted token stands for (the largest chars_per_token among them: no pair's estimate falls
    below the count) and the characters a count reads at most (MAX_CONTEXTS contexts of the
    alias's largest at that figure: a longer prompt is refused by its context anyway), with
    what the chat template adds (`TokenizerRef.template`) and the special tokens the engine
    adds to a completions prompt (`TokenizerRef.special_tokens`). An alias with a pair naming none,
    or two files or two templates (`auto` over families), is left out."""
    named = {e.pair: e.tokenizer for e in entries}
    found: dict[str, AliasTokenizer] = {}
    for alias, pairs in by_alias.items():
        refs = {named.get(p.pair) for p in pairs}
        ref = refs.pop() if len(refs) == 1 else None
        if ref is None:
            continue
        token_chars = max(p.chars_per_token for p in pairs)
        context = max(p.context_length for p in pairs)
        max_chars = math.ceil(MAX_CONTEXTS * context * token_chars)
        special = ref.special_tokens or 0
        found[alias] = AliasTokenizer(
            ref.id, ref.sha256, token_chars, max_chars, ref.template, special
        )
    return found
