"""A refit table: the current table with live-traffic corrections applied to latency lines.

PURE. Each corrected pair's TTFT model (base, per input token, per load, level terms, RMSEs)
is multiplied by its TTFT factor and its TPOT model by its TPOT factor, so every prediction
the data plane makes from it (widened by the RMSE, docs/data_plane.md "Predictions") scales by
the same factor. Prices, accuracy, utility, order and pruning are the current table's: a
refit moves traffic through feasibility (latency budgets), not through a new build. A rebuild from
profiles (`POST /v1/tables`) starts from the profiles again.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from contracts.routing_table import RoutingTable, stamp_table
from control_plane.build.fitting import round_sig
from control_plane.loop.drift import Correction

_TTFT = ("ttft_base_s", "ttft_per_input_token_s", "ttft_per_load_s", "ttft_rmse_s")
_TPOT = ("tpot_base_s", "tpot_per_load_s", "tpot_rmse_s")


def refit_note(samples: int, window_s: float) -> str:
    return f"refit from live traffic: {samples} samples over {window_s / 60:.0f} minutes"


def _scaled(latency: dict[str, Any], correction: Correction) -> dict[str, Any]:
    out = dict(latency)
    for name in _TTFT:
        out[name] = round_sig(latency[name] * correction.ttft_factor)
    for name in _TPOT:
        out[name] = round_sig(latency[name] * correction.tpot_factor)
    for name, factor in (
        ("ttft_load_s", correction.ttft_factor),
        ("ttft_per_input_load_s", correction.ttft_factor),
        ("ttft_rmse_load_s", correction.ttft_factor),
        ("tpot_load_s", correction.tpot_factor),
        ("tpot_rmse_load_s", correction.tpot_factor),
    ):
        if latency.get(name) is not None:
            out[name] = tuple(round_sig(t * factor) for t in latency[name])
    return out


def apply_refit(
    table: RoutingTable,
    corrections: Sequence[Correction],
    window_s: float,
    created_at: datetime,
) -> RoutingTable:
    """The refit table (version 0, to be published); its `refit` says what was done.
    Raises ValueError for a correction of a pair the table does not hold, or no correction."""
    if not corrections:
        raise ValueError("a refit needs at least one correction")
    by_pair = {c.pair: c for c in corrections}
    unknown = sorted(set(by_pair) - {e.pair for e in table.entries})
    if unknown:
        raise ValueError(f"corrections for pairs not in the table: {unknown}")
    data = table.model_dump(mode="python")
    for entry in data["entries"]:
        correction = by_pair.get(entry["pair"])
        if correction is not None:
            entry["latency"] = _scaled(entry["latency"], correction)
    samples = sum(c.samples for c in corrections)
    data.update(
        version=0,
        created_at=created_at,
        refit={
            "note": refit_note(samples, window_s),
            "base_version": table.version,
            "samples": samples,
            "window_s": window_s,
            "slowed": slowed_after(table, corrections),
            "pairs": {
                c.pair: {
                    "samples": c.samples,
                    "observed_e2e_ratio": round_sig(c.e2e_ratio),
                    "ttft_factor": round_sig(c.ttft_factor),
                    "tpot_factor": round_sig(c.tpot_factor),
                }
                for c in corrections
            },
        },
    )
    return stamp_table(data)


SLOWED_MIN_FACTOR = 1.05  # below this a pair counts as back to its profile


def slowed_after(table: RoutingTable, corrections: Sequence[Correction]) -> dict[str, float]:
    """pair -> how much slower than its profile `table` with `corrections` predicts it: the
    product of every refit's e2e factor since the profiles, kept while above
    SLOWED_MIN_FACTOR (data planes probe those pairs, docs/control_plane.md "Latency
    feedback")."""
    slowed = dict(table.refit.slowed) if table.refit is not None else {}
    for c in corrections:
        factor = c.e2e_factor or (c.ttft_factor * c.tpot_factor) ** 0.5
        total = slowed.get(c.pair, 1.0) * factor
        if total > SLOWED_MIN_FACTOR:
            slowed[c.pair] = round_sig(total)
        else:
            slowed.pop(c.pair, None)
    return dict(sorted(slowed.items()))
