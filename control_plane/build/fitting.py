"""Latency models fitted from profile samples with non-negative least squares.

PURE: numpy/scipy arithmetic over contract types; no I/O. The model form is the one
`contracts.routing_table.LatencyModel` documents:

    ttft_s(n_in, load) = ttft_base_s + ttft_per_input_token_s * n_in + ttft_load(load)
    tpot_s(load)       = tpot_base_s + tpot_load(load)

fitted at the policy's quantile, where load is the sample's closed-loop concurrency level and
each load term is measured at the profiled levels (interpolated between them; the per-load
coefficient of the line fitted to all samples beyond the last).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy.optimize import lsq_linear

from contracts.profile_report import LatencySample, Quantiles
from contracts.routing_table import LatencyModel

SIGNIFICANT_DIGITS = 9
Z_95 = 1.6448536269514722  # the standard normal's 0.95 quantile


def round_sig(value: float) -> float:
    """Round to SIGNIFICANT_DIGITS so that last-bit BLAS differences do not change table hashes."""
    if value == 0.0:
        return 0.0  # also folds -0.0 into 0.0
    if not math.isfinite(value):
        return value
    return float(f"{value:.{SIGNIFICANT_DIGITS}g}")


def fit_nonnegative(columns: Sequence[Sequence[float]], target: Sequence[float]) -> list[float]:
    """Coefficients c >= 0 minimising ||sum_j c_j * columns[j] - target||_2.

    Column 0 is the intercept. Any other column that does not vary across samples cannot be
    told apart from the intercept, so its coefficient is 0 (the intercept absorbs it). Columns
    are scaled to unit maximum before solving, for conditioning.
    """
    matrix = np.asarray(columns, dtype=float).T
    y = np.asarray(target, dtype=float)
    keep = [0] + [j for j in range(1, matrix.shape[1]) if np.ptp(matrix[:, j]) > 0.0]
    sub = matrix[:, keep]
    scale = np.max(np.abs(sub), axis=0)
    scale[scale == 0.0] = 1.0
    result = lsq_linear(sub / scale, y, bounds=(0.0, np.inf), method="bvls")
    coef = [0.0] * matrix.shape[1]
    for j, value in zip(keep, result.x / scale, strict=True):
        coef[j] = max(0.0, float(value))
    return coef


def _level_fit(
    load: Sequence[float], n_in: Sequence[float] | None, y: Sequence[float]
) -> tuple[float, float, tuple[float, ...], tuple[float, ...]]:
    """(base, per input token, the profiled levels, the load term at each): `y` fitted as
    per_input x n_in + a constant per load level (non-negative least squares; no input term
    when `n_in` is None or constant), the level constants made non-decreasing in load (latency
    never improves with load); base = the first level's, the terms are the rest above it."""
    levels = sorted(set(load))
    onehot = [[1.0 if ld == level else 0.0 for ld in load] for level in levels]
    with_input = n_in is not None and np.ptp(np.asarray(n_in, dtype=float)) > 0.0
    columns = [*onehot, list(n_in)] if with_input and n_in is not None else onehot
    matrix = np.asarray(columns, dtype=float).T
    scale = np.max(np.abs(matrix), axis=0)
    scale[scale == 0.0] = 1.0
    solved = lsq_linear(matrix / scale, np.asarray(y, dtype=float), bounds=(0.0, np.inf))
    coef = [max(0.0, float(c)) for c in solved.x / scale]
    per_input = coef[-1] if with_input else 0.0
    constants = list(np.maximum.accumulate(coef[: len(levels)]))
    base = constants[0]
    return (
        round_sig(base),
        round_sig(per_input),
        tuple(float(v) for v in levels),
        tuple(round_sig(c - base) for c in constants),
    )


def log_spread(quantiles: Sequence[Quantiles]) -> float:
    """The standard deviation of ln(latency) at one load level, were it log-normal:
    ln(p95 / p50) / z_0.95, averaged over `quantiles` (one per level; levels with a zero
    median say nothing and are left out). 0.0 when none is left."""
    spreads = [math.log(q.p95 / q.p50) / Z_95 for q in quantiles if q.p50 > 0.0]
    return sum(spreads) / len(spreads) if spreads else 0.0


def fit_latency_model(samples: Sequence[LatencySample], quantile: float) -> LatencyModel:
    """Fit TTFT(input tokens, load) and TPOT(load) at `quantile` (one the profile measured).

    Samples are sorted first, so the result does not depend on their order in the report.
    Coefficients are rounded to SIGNIFICANT_DIGITS. Raises ValueError on an empty sequence.
    """
    if not samples:
        raise ValueError("at least one latency sample is needed")
    ordered = sorted(samples, key=lambda s: (s.concurrency, s.input_tokens, s.output_tokens))
    ones = [1.0] * len(ordered)
    load = [float(s.concurrency) for s in ordered]
    n_in = [float(s.input_tokens) for s in ordered]
    ttft = [s.ttft_s.at(quantile) for s in ordered]
    tpot = [s.tpot_s.at(quantile) for s in ordered]
    ttft_cols = [ones, n_in, load]
    tpot_cols = [ones, load]
    ttft_coef = [round_sig(c) for c in fit_nonnegative(ttft_cols, ttft)]
    tpot_coef = [round_sig(c) for c in fit_nonnegative(tpot_cols, tpot)]
    # The lines' slopes in load say little where queueing bends the curve (past the batch
    # size): the load term is taken at each profiled level instead, and the error left is
    # what the prompt-length term misses at a level. The lines' per-load slopes extrapolate.
    ttft_base, per_input, levels, ttft_terms = _level_fit(load, n_in, ttft)
    tpot_base, _, _, tpot_terms = _level_fit(load, None, tpot)
    ttft_fit = [
        ttft_base + per_input * n + ttft_terms[levels.index(ld)]
        for n, ld in zip(n_in, load, strict=True)
    ]
    tpot_fit = [tpot_base + tpot_terms[levels.index(ld)] for ld in load]
    return LatencyModel(
        quantile=quantile,
        ttft_base_s=ttft_base,
        ttft_per_input_token_s=per_input,
        ttft_per_load_s=ttft_coef[2],
        tpot_base_s=tpot_base,
        tpot_per_load_s=tpot_coef[1],
        max_profiled_load=max(s.concurrency for s in ordered),
        ttft_rmse_s=round_sig(_rms(ttft_fit, ttft)),
        tpot_rmse_s=round_sig(_rms(tpot_fit, tpot)),
        load_levels=tuple(int(v) for v in levels),
        ttft_load_s=ttft_terms,
        tpot_load_s=tpot_terms,
        ttft_log_spread=round_sig(log_spread([s.ttft_s for s in ordered])),
        tpot_log_spread=round_sig(log_spread([s.tpot_s for s in ordered])),
    )


def _rms(fitted: Sequence[float], measured: Sequence[float]) -> float:
    diff = np.asarray(fitted, dtype=float) - np.asarray(measured, dtype=float)
    return float(np.sqrt(np.mean(diff**2)))
