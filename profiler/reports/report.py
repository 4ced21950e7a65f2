"""ProfileReport assembly, files and terminal tables.

Builds the report document from the run's facts and measurements, validates it as the
`contracts` ProfileReport, writes and reads report files (errors name the file and field path),
and renders the per-pair summary and the cross-pair comparison as plain text.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from contracts.category_model import LabelledPrompt
from contracts.profile_report import (
    CategoryAccuracy,
    EngineFacts,
    Hardware,
    LatencySample,
    Memory,
    Prices,
    ProfileReport,
)
from contracts.tokenizer_ref import TokenizerRef
from profiler import PROFILER_VERSION
from profiler.errors import InputError
from profiler.evals.accuracy import format_loc


@dataclass(frozen=True, slots=True)
class RunFacts:
    """Everything about a run that is not a measurement (identity, price, provenance)."""

    family: str
    quantization: str
    served_model_name: str
    endpoints: tuple[str, ...]
    hardware: Hardware
    prices: Prices | None
    context_length: int
    engine: str
    engine_version: str
    eval_set_id: str
    eval_set_sha256: str
    started_at: datetime
    git_sha: str | None = None
    host: str | None = None
    eval_prompts: tuple[LabelledPrompt, ...] = ()  # for the control plane's classifier
    tokenizer: TokenizerRef | None = None  # the checkpoint's tokenizer file, where readable


@dataclass(frozen=True, slots=True)
class Measured:
    """What the run measured; sections may be empty when the run was interrupted."""

    latency: tuple[LatencySample, ...]
    accuracy: tuple[CategoryAccuracy, ...]
    chars_per_token: float
    engine_facts: EngineFacts
    memory: Memory
    json_chars_per_token: float | None = None  # None: not measured (the field is left out)
    image_tokens: int | None = None  # None: not measured (the field is left out)


def _token_rates(measured: Measured) -> dict[str, float | int]:
    """The optional figures the run measured; one not measured is left out of the file."""
    rates: dict[str, float | int] = {}
    if measured.json_chars_per_token is not None:
        rates["json_chars_per_token"] = measured.json_chars_per_token
    if measured.image_tokens is not None:
        rates["image_tokens"] = measured.image_tokens
    return rates


def build_document(
    facts: RunFacts, measured: Measured, finished_at: datetime, partial: bool
) -> dict[str, Any]:
    """The report as JSON-ready data. It validates as ProfileReport whenever every section
    holds data; a partial run may leave `latency` or `accuracy` empty."""
    return {
        "family": facts.family,
        "quantization": facts.quantization,
        "served_model_name": facts.served_model_name,
        "endpoints": list(facts.endpoints),
        "hardware": facts.hardware.model_dump(mode="json"),
        "prices": None if facts.prices is None else facts.prices.model_dump(mode="json"),
        "context_length": facts.context_length,
        "chars_per_token": measured.chars_per_token,
        **_token_rates(measured),
        **({} if facts.tokenizer is None else {"tokenizer": facts.tokenizer.model_dump()}),
        "latency": [s.model_dump(mode="json") for s in measured.latency],
        "accuracy": [a.model_dump(mode="json") for a in measured.accuracy],
        "memory": measured.memory.model_dump(mode="json"),
        "engine_facts": measured.engine_facts.model_dump(mode="json"),
        "provenance": {
            "engine": facts.engine,
            "engine_version": facts.engine_version,
            "eval_set_id": facts.eval_set_id,
            "eval_set_sha256": facts.eval_set_sha256,
            "profiler_version": PROFILER_VERSION,
            "git_sha": facts.git_sha,
            "host": facts.host,
            "started_at": facts.started_at.isoformat(),
            "finished_at": finished_at.isoformat(),
            "partial": partial,
        },
        "eval_prompts": [p.model_dump(mode="json") for p in facts.eval_prompts],
    }


def validation_problems(err: ValidationError, source: str) -> list[str]:
    """`source: field.path: message` for every error of a report validation."""
    return [f"{source}: {format_loc(e['loc'])}: {e['msg']}" for e in err.errors()]


def validate_report(document: dict[str, Any], source: str = "report") -> ProfileReport:
    """The document as a ProfileReport; InputError names every bad field by its path."""
    try:
        return ProfileReport.model_validate(document)
    except ValidationError as err:
        raise InputError(validation_problems(err, source)) from err


def write_document(path: Path, document: dict[str, Any]) -> None:
    """Write report JSON atomically (a temp file renamed into place): an interrupted write
    never leaves half a report behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(document, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    tmp.replace(path)


def load_report(path: Path) -> ProfileReport:
    """Read and validate one report file; errors name the file and the field path."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise InputError([f"{path}: cannot read: {err.strerror}"]) from err
    try:
        return ProfileReport.model_validate_json(text)
    except ValidationError as err:
        raise InputError(validation_problems(err, str(path))) from err


def output_usd_per_mtok(report: ProfileReport) -> float | None:
    """Output price: explicit, else hourly price / best measured output throughput."""
    if report.prices is not None:
        return report.prices.output_usd_per_mtok
    best = max(s.output_tokens_per_s for s in report.latency)
    hourly = report.hardware.hourly_usd
    return None if hourly is None else hourly / (best * 3600.0) * 1e6


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for row in rows:
        cells = [c.rjust(w) for c, w in zip(row, widths, strict=True)]
        cells[0] = row[0].ljust(widths[0])
        lines.append("  ".join(cells))
    return "\n".join(lines)


def _ms(value: float) -> str:
    return f"{value * 1000:.1f}"


def render_summary(report: ProfileReport) -> str:
    """A readable, fixed-width summary of one report: load levels, then accuracy."""
    prov = report.provenance
    head = (
        f"{report.pair}  served as {report.served_model_name!r} at {report.endpoints[0]}\n"
        f"{prov.engine} {prov.engine_version} on {report.hardware.name}; context "
        f"{report.context_length}; {report.chars_per_token:.2f} chars/token"
        + ("; PARTIAL (interrupted)" if prov.partial else "")
    )
    load_rows = [
        [
            _level_label(s),
            str(s.requests),
            str(s.errors),
            f"{_ms(s.ttft_s.p50)} / {_ms(s.ttft_s.p95)}",
            f"{_ms(s.tpot_s.p50)} / {_ms(s.tpot_s.p95)}",
            f"{s.e2e_s.p50:.3f} / {s.e2e_s.p95:.3f}",
            f"{s.output_tokens_per_s:.1f}",
            f"{s.requests_per_s:.2f}",
        ]
        for s in report.latency
    ]
    headers = ["load", "reqs", "errs", "TTFT p50/p95 ms", "TPOT p50/p95 ms", "e2e p50/p95 s"]
    load = _table([*headers, "out tok/s", "req/s"], load_rows)
    acc_rows = [
        [a.category, str(a.n), f"{a.accuracy:.3f}", f"[{a.ci_low:.3f}, {a.ci_high:.3f}]"]
        for a in report.accuracy
    ]
    acc = _table(["category", "n", "accuracy", "95% Wilson CI"], acc_rows)
    return f"{head}\n\n{load}\n\n{acc}\n"


def _level_label(sample: LatencySample) -> str:
    if sample.open_loop_rate_rps is not None:
        load = f"{sample.open_loop_rate_rps:g} rps (~c={sample.concurrency})"
    else:
        load = f"c={sample.concurrency}"
    return f"{load} in={sample.input_tokens} out={sample.output_tokens}"


def render_comparison(reports: Sequence[ProfileReport]) -> str:
    """One row per pair: latency at the lightest and heaviest closed-loop load, best
    throughput, output price and accuracy per category (blank where not measured)."""
    categories = sorted({a.category for r in reports for a in r.accuracy})
    headers = ["pair", "TTFT p95 ms", "TPOT p95 ms", "e2e p95 s @max c", "max out tok/s"]
    headers += ["$/Mtok out", "mean acc", *categories]
    rows = []
    for report in sorted(reports, key=lambda r: r.pair):
        closed = [s for s in report.latency if s.open_loop_rate_rps is None] or list(report.latency)
        light = min(closed, key=lambda s: (s.concurrency, s.input_tokens))
        heavy = max(closed, key=lambda s: (s.concurrency, -s.input_tokens))
        price = output_usd_per_mtok(report)
        by_cat = {a.category: a.accuracy for a in report.accuracy}
        mean = math.fsum(by_cat.values()) / len(by_cat)
        rows.append(
            [
                report.pair + (" (partial)" if report.provenance.partial else ""),
                _ms(light.ttft_s.p95),
                _ms(light.tpot_s.p95),
                f"{heavy.e2e_s.p95:.3f}",
                f"{max(s.output_tokens_per_s for s in report.latency):.1f}",
                "-" if price is None else f"{price:.4g}",
                f"{mean:.3f}",
                *(f"{by_cat[c]:.3f}" if c in by_cat else "-" for c in categories),
            ]
        )
    return _table(headers, rows) + "\n"
