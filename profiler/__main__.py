"""`python -m profiler run|fleet|compare|inprocess`: the composition root.

Loads settings once, builds the HTTP session and progress display, runs the command, prints
tables to stdout and logs to stderr. A `ProfilerError` is one line on stderr (no traceback);
Ctrl-C exits 130 after the partial reports are written.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import aiohttp
from pydantic import ValidationError

from contracts.knobs import UnknownKnobsError
from contracts.profile_report import ProfileReport
from profiler.cli import asking_plan, build_parser, decision_target, plan_from_args
from profiler.errors import InputError, ProfilerError, PushError
from profiler.evals.accuracy import format_loc
from profiler.evals.decisions import render_undecided, undecided
from profiler.evals.traffic import load_traffic, render_evidence
from profiler.reports import importing
from profiler.reports.plots import write_plots
from profiler.reports.push import check_push_target, push_report
from profiler.reports.report import load_report, render_comparison, render_summary
from profiler.run.fleet import load_fleet, run_fleet
from profiler.run.inprocess import EngineIdentity, load_vllm_engine, profile_inprocess
from profiler.run.profiling import Runtime, profile_pair
from profiler.run.progress import Progress, SilentProgress, TqdmProgress
from profiler.settings import ProfilerSettings

logger = logging.getLogger("profiler")


def detect_git_sha(settings: ProfilerSettings) -> str | None:
    """The profiler's own commit (settings win); None outside a git checkout."""
    if settings.git_sha:
        return settings.git_sha
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).parent,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    sha = done.stdout.strip()
    return sha if done.returncode == 0 and len(sha) == 40 else None


def open_session(settings: ProfilerSettings) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(limit=settings.max_in_flight + 8, limit_per_host=0)
    timeout = aiohttp.ClientTimeout(
        total=settings.request_timeout_s,
        sock_connect=settings.connect_timeout_s,
        sock_read=settings.read_timeout_s,
    )
    return aiohttp.ClientSession(connector=connector, timeout=timeout)


def push_target(args: argparse.Namespace, settings: ProfilerSettings) -> tuple[str, str] | None:
    """(url, token) when --push is given; checked before any measuring starts."""
    if not getattr(args, "push", None):
        return None
    secret = settings.control_plane_token
    token = args.token or (secret.get_secret_value() if secret else None)
    if not token:
        raise PushError("--push needs a token: --token or GEARBOX_PROF_CONTROL_PLANE_TOKEN")
    return str(args.push), token


async def _check_target(target: tuple[str, str] | None, session: aiohttp.ClientSession) -> None:
    """The push target answers and takes the token: checked before any measuring."""
    if target is not None:
        await check_push_target(session, *target)


async def _check_only(target: tuple[str, str] | None, settings: ProfilerSettings) -> None:
    async with open_session(settings) as session:
        await _check_target(target, session)


async def _finish(
    reports: Sequence[ProfileReport],
    args: argparse.Namespace,
    target: tuple[str, str] | None,
    session: aiohttp.ClientSession,
) -> None:
    """Plots and push, shared by every command that produced reports."""
    if args.plots:
        for path in write_plots(reports, args.plots):
            logger.info("plot written: %s", path)
    if target is None:
        return
    url, token = target
    for report in reports:
        answer = await push_report(session, url, token, report)
        logger.info("pushed %s to %s: %s", report.pair, url, answer[:200])


Origin = tuple[str | None, str | None]  # (git sha, host) for provenance


async def _run(
    args: argparse.Namespace, settings: ProfilerSettings, progress: Progress, origin: Origin
) -> int:
    plan = plan_from_args(args, settings, args.model)
    target = push_target(args, settings)
    async with open_session(settings) as session:
        await _check_target(target, session)
        rt = Runtime(session, settings, progress, *origin)
        report = await profile_pair(plan, rt)
        logger.info("report written: %s", plan.out)
        print(render_summary(report))
        print(_decisions([report], args))
        await _finish([report], args, target, session)
    return 0


async def _fleet(
    args: argparse.Namespace, settings: ProfilerSettings, progress: Progress, origin: Origin
) -> int:
    fleet = load_fleet(args.file)
    plans = tuple(asking_plan(plan, args) for plan in fleet.plans)
    target = push_target(args, settings)
    if args.plots is None and fleet.plots_dir is not None:
        args.plots = fleet.plots_dir
    async with open_session(settings) as session:
        await _check_target(target, session)
        rt = Runtime(session, settings, progress, *origin)
        outcome = await run_fleet(plans, rt, args.parallel or fleet.parallel)
        for report in outcome.reports:
            print(render_summary(report))
        if outcome.reports:
            print(render_comparison(outcome.reports))
            print(_decisions(outcome.reports, args))
            await _finish(outcome.reports, args, target, session)
    for pair, message in outcome.failures:
        print(f"error: {pair}: {message}", file=sys.stderr)
    return 1 if outcome.failures else 0


def _compare(args: argparse.Namespace) -> int:
    reports = [load_report(path) for path in args.reports]
    for report in reports:
        print(render_summary(report))
    print(render_comparison(reports))
    print(_decisions(reports, args))
    if args.plots:
        for path in write_plots(reports, args.plots):
            logger.info("plot written: %s", path)
    return 0


def _decisions(reports: Sequence[ProfileReport], args: argparse.Namespace) -> str:
    """Which pairs the floors leave undecided, per category (docs/accuracy.md)."""
    target = decision_target(args)
    text = render_undecided(undecided(reports, target), target)
    if args.traffic is not None:
        text += render_evidence(reports, load_traffic(args.traffic), target)
    return text


def _inprocess(
    args: argparse.Namespace, settings: ProfilerSettings, progress: Progress, origin: Origin
) -> int:
    if args.until_decided:
        raise InputError(["--until-decided: not supported by inprocess; use run against a server"])
    plan = plan_from_args(args, settings, args.served_model_name or args.model)
    target = push_target(args, settings)
    if target is not None:
        asyncio.run(_check_only(target, settings))
    options = {
        "model": args.model,
        "quantization": args.vllm_quantization,
        "max_model_len": args.max_model_len,
        "dtype": args.dtype,
        "gpu_memory_utilization": args.gpu_memory_utilization,
        "enforce_eager": args.enforce_eager or None,
    }
    engine = load_vllm_engine({k: v for k, v in options.items() if v is not None})
    identity = EngineIdentity(engine.version, engine.context_length, args.model)
    report = profile_inprocess(plan, engine, identity, progress, origin)
    print(render_summary(report))
    print(_decisions([report], args))
    if args.plots or target:
        asyncio.run(_push_only([report], args, target, settings))
    return 0


async def _push_only(
    reports: Sequence[ProfileReport],
    args: argparse.Namespace,
    target: tuple[str, str] | None,
    settings: ProfilerSettings,
) -> None:
    async with open_session(settings) as session:
        await _finish(reports, args, target, session)


def interrupt_on_ctrl_c() -> None:
    """Ctrl-C (SIGINT) raises KeyboardInterrupt, whatever disposition the process inherited.

    Python only installs that handler when SIGINT arrives at its default; a job started in the
    background by a non-interactive shell (`cmd &`) inherits SIGINT *ignored*, and the profiler
    would then never see the signal. With the handler set, `asyncio.run` turns the signal into
    the cancellation that writes the partial report."""
    signal.signal(signal.SIGINT, signal.default_int_handler)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    interrupt_on_ctrl_c()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        settings = ProfilerSettings()
    except UnknownKnobsError as err:  # a GEARBOX_PROF_ variable that is no setting
        print(f"error: {err}", file=sys.stderr)
        return 2
    except ValidationError as err:
        problems = [
            f"GEARBOX_PROF_{format_loc(e['loc']).upper()}: {e['msg']}" for e in err.errors()
        ]
        print("error: " + "; ".join(problems), file=sys.stderr)
        return 2
    progress: Progress = SilentProgress() if getattr(args, "quiet", False) else TqdmProgress()
    origin = (detect_git_sha(settings), socket.gethostname())
    try:
        match args.command:
            case "run":
                return asyncio.run(_run(args, settings, progress, origin))
            case "fleet":
                return asyncio.run(_fleet(args, settings, progress, origin))
            case "compare":
                return _compare(args)
            case "import-lm-eval":
                return importing.import_lm_eval(args)
            case "import-guidellm":
                return importing.import_guidellm(args)
            case _:
                return _inprocess(args, settings, progress, origin)
    except ProfilerError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("interrupted (Ctrl-C); partial reports are named above", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
