"""An imported part put into a report of the same pair, with where it came from.

A report has two measured parts: latency (the load levels) and accuracy (the per-category
outcomes, with the eval set's identity and prompts). An import replaces one part whole, never
mixes levels or categories from two sources, and records the part's source in
`provenance.sources`; the other part keeps the source it had (the profiler run, when the
report names none). PURE.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal

from contracts.profile_report import (
    EngineFacts,
    LatencySample,
    PartSource,
    ProfileReport,
    SourceFile,
)
from profiler.reports.lm_eval_import import AccuracyPart


def _sources(base: ProfileReport, replaced: PartSource) -> tuple[PartSource, ...]:
    """The other part's source (made explicit), and the new one; latency first."""
    kept: dict[str, PartSource] = {s.part: s for s in base.provenance.sources}
    other: Literal["latency", "accuracy"] = "accuracy" if replaced.part == "latency" else "latency"
    kept.setdefault(
        other,
        PartSource(
            part=other,
            tool="gearbox-profiler",
            tool_version=base.provenance.profiler_version,
            model=base.served_model_name,
        ),
    )
    kept[replaced.part] = replaced
    return tuple(kept[p] for p in ("latency", "accuracy"))


def with_accuracy(
    base: ProfileReport,
    part: AccuracyPart,
    *,
    tool_version: str | None,
    model: str,
    files: Sequence[SourceFile],
    now: datetime,
) -> ProfileReport:
    """`base` with lm-eval's accuracy, eval set identity and prompts."""
    source = PartSource(
        part="accuracy",
        tool="lm-eval",
        tool_version=tool_version,
        model=model,
        files=tuple(files),
        imported_at=now,
    )
    provenance = base.provenance.model_copy(
        update={
            "eval_set_id": part.eval_set_id,
            "eval_set_sha256": part.eval_set_sha256,
            "sources": _sources(base, source),
        }
    )
    return ProfileReport.model_validate(
        {
            **base.model_dump(),
            "accuracy": [a.model_dump() for a in part.accuracy],
            "eval_prompts": [p.model_dump() for p in part.prompts],
            "provenance": provenance.model_dump(),
        }
    )


def with_latency(
    base: ProfileReport,
    levels: Sequence[LatencySample],
    *,
    tool_version: str | None,
    model: str | None,
    files: Sequence[SourceFile],
    now: datetime,
    chars_per_token: float | None = None,
) -> ProfileReport:
    """`base` with GuideLLM's load levels. The engine facts the profiler read from the
    engine's /metrics during its own sweep describe that sweep, not this one: they are
    dropped rather than attributed to levels they were not read during."""
    source = PartSource(
        part="latency",
        tool="guidellm",
        tool_version=tool_version,
        model=model,
        files=tuple(files),
        imported_at=now,
    )
    provenance = base.provenance.model_copy(update={"sources": _sources(base, source)})
    update: dict[str, Any] = {
        "latency": [lv.model_dump() for lv in levels],
        "engine_facts": EngineFacts().model_dump(),
        "provenance": provenance.model_dump(),
    }
    if chars_per_token is not None:
        update["chars_per_token"] = chars_per_token
    return ProfileReport.model_validate({**base.model_dump(), **update})
