"""Command-line grammar: the argparse parser and the translation of flags into a PairPlan.

No I/O beyond argparse's own usage errors; `__main__` runs what is parsed here.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import yaml
from pydantic import TypeAdapter, ValidationError

from contracts.names import Family, HttpUrl, Quantization
from contracts.policy import PolicyError, load_policy
from contracts.profile_report import Hardware, Prices
from profiler import PROFILER_VERSION
from profiler.errors import InputError
from profiler.evals.accuracy import format_loc
from profiler.evals.decisions import DEFAULT_FLOORS, DecisionTarget
from profiler.evals.traffic import load_traffic
from profiler.load.workload import build_sweep
from profiler.reports import importing
from profiler.run.profiling import PairPlan, builtin_evalsets
from profiler.settings import ProfilerSettings

_FAMILY: TypeAdapter[str] = TypeAdapter(Family)
_QUANT: TypeAdapter[str] = TypeAdapter(Quantization)
_URL: TypeAdapter[str] = TypeAdapter(HttpUrl)


def int_list(text: str) -> list[int]:
    """`1,2,4` -> [1, 2, 4] (argparse type)."""
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"expected integers like 1,2,4, got {text!r}") from err


def _pair_args(parser: argparse.ArgumentParser) -> None:
    pair = parser.add_argument_group("pair")
    pair.add_argument("--family", required=True, help="model family, e.g. llama-3.1-8b")
    pair.add_argument("--quantization", required=True, help="e.g. bf16, fp8, awq-int4")
    pair.add_argument(
        "--endpoint", action="append", required=True, metavar="URL",
        help="engine base URL, e.g. http://host:8000 (repeat for replicas; load goes to the first)",
    )  # fmt: skip
    pair.add_argument("--hardware", help="hardware name (default: GEARBOX_PROF_HARDWARE)")
    pair.add_argument("--hourly-usd", type=float, help="hardware price per hour")
    pair.add_argument("--input-price", type=float, help="USD per million input tokens")
    pair.add_argument("--output-price", type=float, help="USD per million output tokens")
    pair.add_argument("--engine-version", help="default: detected from /version or /metrics")
    pair.add_argument("--context-length", type=int, help="default: max_model_len")
    load = parser.add_argument_group("load sweep")
    load.add_argument("--concurrency", type=int_list, default=[1, 2, 4, 8], metavar="1,2,4,8")
    load.add_argument("--input-tokens", type=int_list, default=[128, 512], metavar="128,512")
    load.add_argument("--output-tokens", type=int_list, default=[64], metavar="64")
    load.add_argument("--requests-per-level", type=int, default=32, metavar="N")
    load.add_argument("--warmup", type=int, default=2, metavar="N", help="per level, excluded")
    load.add_argument("--open-loop-rps", type=float, metavar="R", help="add open-loop levels")
    out = parser.add_argument_group("output")
    out.add_argument("--evalset", nargs="+", type=Path, help="JSONL files (default: built-in)")
    out.add_argument("--out", type=Path, help="report file (default: FAMILY@QUANT.json)")
    _output_args(out)
    _decision_args(parser, asking=True)


def float_list(text: str) -> list[float]:
    """`0.7,0.8` -> [0.7, 0.8], each in [0, 1] (argparse type)."""
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"expected numbers like 0.7,0.8, got {text!r}") from err
    if not values or any(not 0.0 <= v <= 1.0 for v in values):
        raise argparse.ArgumentTypeError(f"floors must be in [0, 1], got {text!r}")
    return values


def _decision_args(parser: argparse.ArgumentParser, *, asking: bool) -> None:
    group = parser.add_argument_group("decisions (docs/accuracy.md)")
    group.add_argument(
        "--policy", type=Path, help="take floors, floor_confidence and min_eval_items from it"
    )
    group.add_argument(
        "--floors", type=float_list, metavar="0.7,0.8,0.9",
        help=f"floors to decide (default: the policy's, else {DEFAULT_FLOORS})",
    )  # fmt: skip
    group.add_argument("--confidence", type=float, help="one-sided confidence (default 0.90)")
    group.add_argument("--min-items", type=int, help="fewer items = unknown (default 20)")
    group.add_argument(
        "--traffic", type=Path, metavar="FILE",
        help="the control plane's GET /v1/evidence body: rank undecided pairs by the traffic "
        "deciding them would move",
    )  # fmt: skip
    if asking:
        group.add_argument(
            "--until-decided", action="store_true",
            help="ask items of a category in batches until no floor is undecided",
        )  # fmt: skip
        group.add_argument(
            "--first-items", type=int, default=100, metavar="N",
            help="items per category to start with under --until-decided (default 100)",
        )  # fmt: skip
        group.add_argument(
            "--item-budget", type=int, metavar="N",
            help="under --until-decided, at most N items after the first ones, spent in "
            "--traffic's order",
        )  # fmt: skip


def _policy_target(path: Path) -> DecisionTarget:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise InputError([f"{path}: cannot read: {err.strerror}"]) from err
    except yaml.YAMLError as err:
        raise InputError([f"{path}: not valid YAML: {err}"]) from err
    try:
        policy = load_policy(data)
    except PolicyError as err:
        raise InputError([f"{path}: {e}" for e in err.errors]) from err
    floors = sorted({c.min_accuracy for c in policy.categories.values() if c.min_accuracy > 0})
    return DecisionTarget(
        tuple(floors) or DEFAULT_FLOORS, policy.floor_confidence, policy.min_eval_items
    )


def decision_target(args: argparse.Namespace) -> DecisionTarget:
    """The floors and confidence the flags (and --policy) describe."""
    target = DecisionTarget() if args.policy is None else _policy_target(args.policy)
    problems = []
    if args.confidence is not None and not 0.5 <= args.confidence < 1.0:
        problems.append(f"--confidence {args.confidence}: must be in [0.5, 1)")
    if args.min_items is not None and args.min_items < 1:
        problems.append(f"--min-items {args.min_items}: must be at least 1")
    if getattr(args, "first_items", 1) < 1:
        problems.append(f"--first-items {args.first_items}: must be at least 1")
    budget = getattr(args, "item_budget", None)
    if budget is not None and budget < 0:
        problems.append(f"--item-budget {budget}: must be at least 0")
    if budget is not None and not getattr(args, "until_decided", False):
        problems.append("--item-budget: only with --until-decided")
    if problems:
        raise InputError(problems)
    return replace(
        target,
        floors=tuple(args.floors) if args.floors else target.floors,
        confidence=target.confidence if args.confidence is None else args.confidence,
        min_items=target.min_items if args.min_items is None else args.min_items,
    )


def _output_args(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--plots", type=Path, metavar="DIR", help="write PNG plots here")
    group.add_argument("--push", metavar="URL", help="control plane to push reports to")
    group.add_argument("--token", help="bearer token (default: GEARBOX_PROF_CONTROL_PLANE_TOKEN)")
    group.add_argument("--quiet", action="store_true", help="no progress bars")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m profiler", description="Measure (model, quantization) pairs."
    )
    parser.add_argument("--version", action="version", version=PROFILER_VERSION)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="profile one pair served over HTTP")
    run.add_argument("--model", required=True, help="served model name at the endpoint")
    _pair_args(run)
    fleet = commands.add_parser("fleet", help="profile every pair of a fleet file")
    fleet.add_argument("file", type=Path)
    fleet.add_argument("--parallel", type=int, help="pairs profiled at once (default: file's)")
    _output_args(fleet.add_argument_group("output"))
    _decision_args(fleet, asking=True)
    compare = commands.add_parser("compare", help="compare report files side by side")
    compare.add_argument("reports", nargs="+", type=Path)
    compare.add_argument("--plots", type=Path, metavar="DIR")
    _decision_args(compare, asking=False)
    inproc = commands.add_parser("inprocess", help="run the engine in-process via vllm.LLM")
    inproc.add_argument("--model", required=True, help="checkpoint path or model id for vLLM")
    inproc.add_argument("--served-model-name", help="name in the report (default: --model)")
    inproc.add_argument("--vllm-quantization", help="vLLM's quantization method, if any")
    inproc.add_argument("--max-model-len", type=int)
    inproc.add_argument("--dtype", default="auto")
    inproc.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    inproc.add_argument(
        "--enforce-eager", action="store_true", help="skip torch.compile (faster start)"
    )
    _pair_args(inproc)
    importing.add_parsers(commands)
    return parser


def _hardware(args: argparse.Namespace, settings: ProfilerSettings) -> Hardware:
    name = args.hardware or settings.hardware or "unspecified"
    return Hardware(name=name, hourly_usd=args.hourly_usd)


def _prices(args: argparse.Namespace) -> Prices | None:
    if (args.input_price is None) != (args.output_price is None):
        raise InputError(["--input-price and --output-price go together"])
    if args.input_price is None:
        if args.hourly_usd is None:
            raise InputError(["price: pass --hourly-usd, or --input-price and --output-price"])
        return None
    return Prices(input_usd_per_mtok=args.input_price, output_usd_per_mtok=args.output_price)


def plan_from_args(args: argparse.Namespace, settings: ProfilerSettings, served: str) -> PairPlan:
    """The PairPlan the flags describe; InputError names every bad flag."""
    try:
        sweep = build_sweep(
            args.concurrency,
            args.input_tokens,
            args.output_tokens,
            args.requests_per_level,
            args.warmup,
            args.open_loop_rps,
        )
        plan = PairPlan(
            family=args.family,
            quantization=args.quantization,
            served_model_name=served,
            endpoints=tuple(args.endpoint),
            hardware=_hardware(args, settings),
            prices=_prices(args),
            sweep=sweep,
            evalsets=tuple(args.evalset) if args.evalset else builtin_evalsets(),
            engine=settings.engine,
            engine_version=args.engine_version or settings.engine_version,
            context_length=args.context_length,
        )
    except ValidationError as err:
        raise InputError([f"{format_loc(e['loc'])}: {e['msg']}" for e in err.errors()]) from err
    except ValueError as err:
        raise InputError([f"--{str(err).replace('_', '-')}"]) from err
    out = args.out or Path(f"{plan.pair}.json")
    return asking_plan(_checked(plan, out), args)


def asking_plan(plan: PairPlan, args: argparse.Namespace) -> PairPlan:
    """`plan` with `--until-decided` (and its target) applied, when given."""
    target = decision_target(args)  # checks the flags either way
    if not args.until_decided:
        return plan
    traffic = load_traffic(args.traffic) if args.traffic is not None else None
    return replace(
        plan,
        decide=target,
        first_items=args.first_items,
        item_budget=args.item_budget,
        traffic=traffic,
    )


def _checked(plan: PairPlan, out: Path) -> PairPlan:
    """Check names and URLs as the report will, before anything is sent anywhere."""
    problems = []
    checks = [("--family", _FAMILY, plan.family), ("--quantization", _QUANT, plan.quantization)]
    checks += [("--endpoint", _URL, url) for url in plan.endpoints]
    endpoints = []
    for flag, adapter, value in checks:
        try:
            checked = adapter.validate_python(value)
        except ValidationError as err:
            problems.append(f"{flag} {value!r}: {err.errors()[0]['msg']}")
            continue
        if flag == "--endpoint":
            endpoints.append(checked)
    if len(set(endpoints)) != len(endpoints):
        problems.append("--endpoint: the same URL is given twice")
    if problems:
        raise InputError(problems)
    return replace(plan, endpoints=tuple(endpoints), out=out)
