"""A target check: figure, baseline, ratio, target, pass/fail; every section's verdicts make
these and the report prints them (bench/report.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Check:
    section: str
    name: str
    figure: float
    baseline: float
    ratio: float
    unit: str
    target: str
    passed: bool
    detail: str = ""
