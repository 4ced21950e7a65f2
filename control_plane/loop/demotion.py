"""Accuracy demotions on a table: demote, lift, and carry them onto a rebuild.

PURE. A demotion lowers a pair's accuracy in one category to what live agreement with its
reference supports (`accuracy_drift`): the bound floors compare with becomes the evidence's
lower bound (docs/accuracy.md "Live checks"), so the published number is a lower bound at the
policy's confidence, never a point estimate. The profile's values are kept in the table's
`demotions`, which lifting restores and a rebuild from profiles carries (a new build does not
silently undo the evidence; its own profile values become the ones to restore).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from contracts.routing_table import RoutingTable, stamp_table
from control_plane.loop.accuracy_drift import DemotionPlan


def demotion_note(plan: DemotionPlan, window_s: float) -> str:
    minutes = f"{window_s / 60:.0f} minutes"
    parts = []
    if plan.demote:
        checks = sum(a.checks for a in plan.demote)
        parts.append(f"accuracy demoted from {plan.source}: {checks} checks over {minutes}")
    if plan.lift:
        checks = sum(a.checks for a in plan.lift)
        parts.append(f"accuracy demotion lifted: {checks} fresh checks over {minutes}")
    return "; ".join(parts)


def _lower(entry: dict[str, Any], category: str, bound: float, point: float) -> None:
    """Lower one category of a plain-data entry to `bound` (what floors compare with) and its
    accuracy to `point`, never raising either; a table without bounds routes on accuracy, so
    there the bound goes into accuracy."""
    accuracy = entry["accuracy"]
    bounds = entry.get("accuracy_bound") or {}
    if bounds:
        bounds[category] = min(bounds.get(category, 0.0), bound)
        accuracy[category] = max(bounds[category], min(accuracy[category], point))
    else:
        accuracy[category] = min(accuracy[category], bound)


def _profile_values(entry: Mapping[str, Any], category: str) -> dict[str, Any]:
    """What a demotion of `category` keeps to restore: the entry's values before it."""
    bounds = entry.get("accuracy_bound") or {}
    return {
        "profile_accuracy": entry["accuracy"][category],
        "profile_bound": bounds.get(category, 0.0) if bounds else None,
    }


def apply_demotions(
    table: RoutingTable, plan: DemotionPlan, window_s: float, created_at: datetime
) -> RoutingTable:
    """The current table with `plan.demote` demoted and `plan.lift` restored (version 0, to
    be published on `table.version`). Raises ValueError for an empty plan."""
    if not plan:
        raise ValueError("a demotion needs at least one pair")
    data = table.model_dump(mode="python")
    entries = {e["pair"]: e for e in data["entries"]}
    demotions: dict[str, dict[str, Any]] = data["demotions"]
    for a in plan.lift:
        kept = demotions.get(a.pair, {}).pop(a.category, None)
        if kept is None:
            continue
        entry = entries[a.pair]
        entry["accuracy"][a.category] = kept["profile_accuracy"]
        if kept["profile_bound"] is not None and entry.get("accuracy_bound"):
            entry["accuracy_bound"][a.category] = kept["profile_bound"]
    for a in plan.demote:
        entry = entries[a.pair]
        demotions.setdefault(a.pair, {})[a.category] = {
            **_profile_values(entry, a.category),
            "checks": a.checks,
            "agreed": a.agreed,
            "base_version": table.version,
        }
        _lower(entry, a.category, a.accuracy_lower, a.implied)
    data["demotions"] = {p: c for p, c in demotions.items() if c}
    data.update(
        version=0,
        created_at=created_at,
        refit={
            "note": demotion_note(plan, window_s),
            "base_version": table.version,
            "samples": sum(a.checks for a in (*plan.demote, *plan.lift)),
            "window_s": window_s,
            "pairs": {},
            "demoted": {a.pair: {a.category: round(a.accuracy_lower, 6)} for a in plan.demote},
        },
    )
    return stamp_table(data)


def _routed_on(entry: Mapping[str, Any], category: str) -> float:
    bounds = entry.get("accuracy_bound") or {}
    return float(bounds.get(category, 0.0) if bounds else entry["accuracy"][category])


def carry_demotions(built: RoutingTable, current: RoutingTable | None) -> RoutingTable:
    """`built` (a rebuild from profiles) with the demotions in force in `current`: each pair
    and category both tables hold keeps the lower of the two routed-on numbers, and its
    demotion record now keeps the new profile's values. Demotions of pairs or categories the
    rebuild dropped go with them. `built` itself when there is nothing to carry."""
    if current is None or not current.demotions:
        return built
    old = {e.pair: e.model_dump(mode="python") for e in current.entries}
    data = built.model_dump(mode="python")
    carried: dict[str, dict[str, Any]] = {}
    for entry in data["entries"]:
        for category, kept in current.demotions.get(entry["pair"], {}).items():
            if category not in entry["accuracy"] or entry["pair"] not in old:
                continue
            before = old[entry["pair"]]
            record = {**kept.model_dump(mode="python"), **_profile_values(entry, category)}
            carried.setdefault(entry["pair"], {})[category] = record
            _lower(entry, category, _routed_on(before, category), before["accuracy"][category])
    if not carried:
        return built
    data["demotions"] = carried
    return stamp_table(data)
