"""Latency models fitted from profile samples with non-negative least squares.

PURE: numpy/scipy arithmetic over contract types; no I/O. The model form is the one
`contracts.routing_table.LatencyModel` documents:

    ttft_s(n_in, load) = ttft_base_s + ttft_per_input(load) * n_in + ttft_load(load)
    tpot_s(load)       = tpot_base_s + tpot_load(load)

fitted at the policy's quantile, where load is the sample's closed-loop concurrency level and
each load term, and the seconds per input token, is measured at the profiled levels
(interpolated between them; beyond the last, the per-load coefficient of the line fitted to
all samples extends a load term, and the per-token cost stays the last level's), with the
residuals' RMSE at each level (the error the data plane adds at that load).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from scipy.optimize import lsq_linear

from contracts.profile_report import LatencySample, Quantiles
from contracts.routing_table import LatencyModel

SIGNIFICANT_DIGITS = 9
Z_95 = 1.6448536269514722  # the standard normal's 0.95 quantile
_EXACT = 1e-9  # residuals below this share of the largest latency are rounding, not misfit


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


class LevelFit(NamedTuple):
    """A latency fitted per profiled level: at level i, y = base + per_input x n_in +
    terms[i] + per_input_terms[i] x n_in; `rmse` = its residuals' RMS at each level."""

    base: float
    per_input: float
    levels: tuple[float, ...]
    terms: tuple[float, ...]
    per_input_terms: tuple[float, ...]
    rmse: tuple[float, ...]
    fitted: tuple[float, ...]  # at each sample, in the order given


def _shared_slope(load: Sequence[float], n_in: Sequence[float], y: Sequence[float]) -> float:
    """The seconds per input token of `y` fitted as that slope plus a constant per level
    (non-negative least squares): the slope a level measured at one prompt length takes."""
    levels = sorted(set(load))
    onehot = [[1.0 if ld == level else 0.0 for ld in load] for level in levels]
    matrix = np.asarray([*onehot, list(n_in)], dtype=float).T
    scale = np.max(np.abs(matrix), axis=0)
    scale[scale == 0.0] = 1.0
    solved = lsq_linear(matrix / scale, np.asarray(y, dtype=float), bounds=(0.0, np.inf))
    return max(0.0, float(solved.x[-1] / scale[-1]))


def _level_fit(load: Sequence[float], n_in: Sequence[float] | None, y: Sequence[float]) -> LevelFit:
    """`y` fitted at each load level on its own as a line in `n_in` (non-negative least squares;
    no input term when `n_in` is None or constant; the shared slope of `_shared_slope` at a
    level measured at one prompt length). Slopes, then intercepts, are made non-decreasing in
    load (latency never improves with load); the first level's are the base, the rest the
    terms above it. A level has its own slope because a prompt's TTFT under load includes the
    prefill of the prompts queued ahead of it, which the profile sized like its own."""
    levels = sorted(set(load))
    x = np.zeros(len(y)) if n_in is None else np.asarray(n_in, dtype=float)
    ys = np.asarray(y, dtype=float)
    at = [np.asarray(load) == level for level in levels]
    shared = _shared_slope(load, list(x), y) if np.ptp(x) > 0.0 else 0.0
    slopes = [
        fit_nonnegative([[1.0] * int(m.sum()), x[m].tolist()], ys[m].tolist())[1]
        if np.ptp(x[m]) > 0.0
        else shared
        for m in at
    ]
    slopes = list(np.maximum.accumulate(slopes))
    intercepts = [
        max(0.0, float(np.mean(ys[m] - s * x[m]))) for m, s in zip(at, slopes, strict=True)
    ]
    intercepts = list(np.maximum.accumulate(intercepts))
    index = {level: i for i, level in enumerate(levels)}
    fitted = tuple(
        intercepts[index[ld]] + slopes[index[ld]] * xi for ld, xi in zip(load, x, strict=True)
    )
    miss = np.asarray(fitted) - ys
    miss[np.abs(miss) <= _EXACT * np.max(np.abs(ys))] = 0.0  # last-bit noise of an exact fit
    return LevelFit(
        base=round_sig(intercepts[0]),
        per_input=round_sig(slopes[0]),
        levels=tuple(float(v) for v in levels),
        terms=tuple(round_sig(c - intercepts[0]) for c in intercepts),
        per_input_terms=tuple(round_sig(s - slopes[0]) for s in slopes),
        rmse=tuple(round_sig(float(np.sqrt(np.mean(miss[m] ** 2)))) for m in at),
        fitted=fitted,
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
    # size): the load terms are taken at each profiled level instead, with the error left at
    # that level. The lines' per-load slopes extrapolate.
    t = _level_fit(load, n_in, ttft)
    p = _level_fit(load, None, tpot)
    return LatencyModel(
        quantile=quantile,
        ttft_base_s=t.base,
        ttft_per_input_token_s=t.per_input,
        ttft_per_load_s=ttft_coef[2],
        tpot_base_s=p.base,
        tpot_per_load_s=tpot_coef[1],
        max_profiled_load=max(s.concurrency for s in ordered),
        ttft_rmse_s=round_sig(_rms(t.fitted, ttft)),
        tpot_rmse_s=round_sig(_rms(p.fitted, tpot)),
        load_levels=tuple(int(v) for v in t.levels),
        ttft_load_s=t.terms,
        tpot_load_s=p.terms,
        ttft_log_spread=round_sig(log_spread([s.ttft_s for s in ordered])),
        tpot_log_spread=round_sig(log_spread([s.tpot_s for s in ordered])),
        ttft_per_input_load_s=t.per_input_terms,
        ttft_rmse_load_s=t.rmse,
        tpot_rmse_load_s=p.rmse,
    )


def _rms(fitted: Sequence[float], measured: Sequence[float]) -> float:
    diff = np.asarray(fitted, dtype=float) - np.asarray(measured, dtype=float)
    return float(np.sqrt(np.mean(diff**2)))
