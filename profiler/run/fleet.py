"""Fleet files: several pairs profiled in one command, one after another or N at a time.

A fleet file is written by people, so unknown keys and bad values fail with their field path
(`fleet.yaml: pairs[1].load.concurrency[0]: ...`). Relative paths resolve against the file.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from contracts.names import Family, HttpUrl, Quantization
from contracts.profile_report import Hardware, Prices, ProfileReport
from contracts.strict import find_unknown_keys
from profiler.errors import InputError, ProfilerError
from profiler.evals.accuracy import format_loc
from profiler.load.workload import build_sweep
from profiler.run.profiling import PairPlan, Runtime, builtin_evalsets, profile_pair

logger = logging.getLogger(__name__)


class _Spec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LoadSpec(_Spec):
    """The load sweep (see `workload.build_sweep`)."""

    concurrency: list[int] = Field(default=[1, 2, 4, 8], min_length=1)
    input_tokens: list[int] = Field(default=[128, 512], min_length=1)
    output_tokens: list[int] = Field(default=[64], min_length=1)
    requests_per_level: int = Field(default=32, ge=1, le=1_000_000)
    warmup: int = Field(default=2, ge=0, le=10_000)
    open_loop_rps: float | None = Field(default=None, gt=0, allow_inf_nan=False)


class LoadOverride(_Spec):
    """Per-pair changes to the default load; fields left out keep the default."""

    concurrency: list[int] | None = Field(default=None, min_length=1)
    input_tokens: list[int] | None = Field(default=None, min_length=1)
    output_tokens: list[int] | None = Field(default=None, min_length=1)
    requests_per_level: int | None = Field(default=None, ge=1, le=1_000_000)
    warmup: int | None = Field(default=None, ge=0, le=10_000)
    open_loop_rps: float | None = Field(default=None, gt=0, allow_inf_nan=False)


class Defaults(_Spec):
    hardware: Hardware | None = None
    prices: Prices | None = None
    engine: str = Field(default="vllm", min_length=1, max_length=100)
    engine_version: str | None = Field(default=None, min_length=1, max_length=100)
    load: LoadSpec = LoadSpec()
    evalsets: list[Path] = Field(default_factory=list, description="empty = the built-in sets")


class PairSpec(_Spec):
    family: Family
    quantization: Quantization
    served_model_name: str = Field(min_length=1, max_length=200)
    endpoints: list[HttpUrl] = Field(min_length=1, max_length=64)
    hardware: Hardware | None = None
    prices: Prices | None = None
    engine_version: str | None = Field(default=None, min_length=1, max_length=100)
    context_length: int | None = Field(default=None, ge=16)
    load: LoadOverride = LoadOverride()
    evalsets: list[Path] | None = None


class FleetSpec(_Spec):
    out_dir: Path = Path("profiles")
    plots_dir: Path | None = None
    parallel: int = Field(default=1, ge=1, le=64)
    defaults: Defaults = Defaults()
    pairs: list[PairSpec] = Field(min_length=1)


@dataclass(frozen=True, slots=True)
class Fleet:
    plans: tuple[PairPlan, ...]
    parallel: int
    plots_dir: Path | None


def parse_fleet(data: Any, source: str, base_dir: Path) -> Fleet:
    """Validate fleet data and turn it into one plan per pair; InputError lists every problem
    as `source: field.path: message`."""
    if not isinstance(data, dict):
        raise InputError([f"{source}: (root): must be a mapping with a `pairs` list"])
    problems = [f"{source}: {p}: unknown field" for p in find_unknown_keys(FleetSpec, data)]
    try:
        spec = FleetSpec.model_validate(data)
    except ValidationError as err:
        problems += [
            f"{source}: {format_loc(e['loc'])}: {e['msg']}"
            for e in err.errors()
            if e["type"] != "extra_forbidden"  # already named by find_unknown_keys
        ]
        raise InputError(problems) from err
    if problems:
        raise InputError(problems)
    plans, problems = [], []
    for index, pair in enumerate(spec.pairs):
        try:
            plans.append(_plan(spec, pair, base_dir))
        except ValueError as err:
            problems.append(f"{source}: pairs[{index}]: {err}")
    names = [p.pair for p in plans]
    twice = sorted({n for n in names if names.count(n) > 1})
    problems += [f"{source}: pair {n} is listed more than once" for n in twice]
    if problems:
        raise InputError(problems)
    plots = None if spec.plots_dir is None else base_dir / spec.plots_dir
    return Fleet(plans=tuple(plans), parallel=spec.parallel, plots_dir=plots)


def _plan(spec: FleetSpec, pair: PairSpec, base_dir: Path) -> PairPlan:
    defaults = spec.defaults
    hardware = pair.hardware or defaults.hardware
    prices = pair.prices or defaults.prices
    if hardware is None:
        raise ValueError("hardware: required here or in defaults.hardware")
    if prices is None and hardware.hourly_usd is None:
        raise ValueError("needs prices or hardware.hourly_usd (here or in defaults)")
    load = defaults.load.model_copy(update=pair.load.model_dump(exclude_unset=True))
    try:
        sweep = build_sweep(
            load.concurrency,
            load.input_tokens,
            load.output_tokens,
            load.requests_per_level,
            load.warmup,
            load.open_loop_rps,
        )
    except ValueError as err:
        raise ValueError(f"load.{err}") from err
    sets = pair.evalsets if pair.evalsets is not None else defaults.evalsets
    evalsets = tuple(base_dir / p for p in sets) if sets else builtin_evalsets()
    out = base_dir / spec.out_dir / f"{pair.family}@{pair.quantization}.json"
    return PairPlan(
        family=pair.family,
        quantization=pair.quantization,
        served_model_name=pair.served_model_name,
        endpoints=tuple(pair.endpoints),
        hardware=hardware,
        prices=prices,
        sweep=sweep,
        evalsets=evalsets,
        engine=defaults.engine,
        engine_version=pair.engine_version or defaults.engine_version,
        context_length=pair.context_length,
        out=out,
    )


def load_fleet(path: Path) -> Fleet:
    """Read a YAML (or JSON) fleet file; errors name the file, and the field path or line."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise InputError([f"{path}: cannot read: {err.strerror}"]) from err
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise InputError([f"{path}: not valid YAML: {err}"]) from err
    return parse_fleet(data, str(path), path.parent)


@dataclass(frozen=True, slots=True)
class FleetOutcome:
    reports: tuple[ProfileReport, ...]
    failures: tuple[tuple[str, str], ...]  # (pair, message)


async def run_fleet(plans: Sequence[PairPlan], rt: Runtime, parallel: int) -> FleetOutcome:
    """Profile every plan, at most `parallel` at a time. A pair that fails is reported and the
    others go on; a cancellation stops all (each writes its partial report)."""
    slots = asyncio.Semaphore(parallel)
    reports: dict[str, ProfileReport] = {}
    failures: list[tuple[str, str]] = []

    async def one(plan: PairPlan) -> None:
        async with slots:
            logger.info("profiling %s at %s", plan.pair, plan.endpoints[0])
            try:
                reports[plan.pair] = await profile_pair(plan, rt)
            except ProfilerError as err:
                logger.error("%s: %s", plan.pair, err)
                failures.append((plan.pair, str(err)))

    async with asyncio.TaskGroup() as group:
        for plan in plans:
            group.create_task(one(plan))
    ordered = tuple(reports[p.pair] for p in plans if p.pair in reports)
    return FleetOutcome(reports=ordered, failures=tuple(failures))
