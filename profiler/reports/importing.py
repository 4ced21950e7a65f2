"""`python -m profiler import-lm-eval | import-guidellm`: another tool's measurements of a pair
put into that pair's report (docs/profiler.md, "Importing lm-eval and GuideLLM results").

Both read a report the profiler wrote (`--into`), replace one part with the imported one and
write the result to `--out` (which may be the same file), with the part's source in
`provenance.sources`. The names must agree: the model the tool asked for is the report's
`served_model_name`, unless `--model` says which name the tool used.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from pathlib import Path

from contracts.profile_report import ProfileReport
from profiler.errors import InputError
from profiler.reports import guidellm_import, lm_eval_import
from profiler.reports.merge import with_accuracy, with_latency
from profiler.reports.report import load_report, render_summary, write_document


def add_parsers(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    lm = commands.add_parser(
        "import-lm-eval", help="accuracy from lm-eval's --log_samples output, into a report"
    )
    lm.add_argument(
        "samples",
        nargs="+",
        type=Path,
        help="lm-eval's samples_<task>_<time>.jsonl files or output folders",
    )
    lm.add_argument(
        "--category",
        action="append",
        default=[],
        metavar="TASK=CATEGORY",
        help="a task's category (repeat; well-known tasks have defaults)",
    )
    lm.add_argument("--metric", help="the per-item 0/1 metric (default: exact_match, acc, ...)")
    lm.add_argument("--filter", dest="filter_name", help="the lm-eval filter to read")
    _common(lm)
    gl = commands.add_parser(
        "import-guidellm", help="latency from a GuideLLM benchmark report, into a report"
    )
    gl.add_argument("report", type=Path, help="the JSON GuideLLM wrote (--output-path)")
    _common(gl)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--into", required=True, type=Path, help="the pair's report, written by the profiler"
    )
    parser.add_argument("--out", required=True, type=Path, help="where the merged report goes")
    parser.add_argument("--model", help="the model name the tool used, if not the report's")


def _check_model(base: ProfileReport, used: str | None, expected: str | None, tool: str) -> None:
    wanted = expected or base.served_model_name
    if used is not None and used != wanted:
        raise InputError(
            [
                f"{tool} measured model {used!r}, the report is for "
                f"{base.served_model_name!r}: pass --model {used} if it is the same "
                "deployment"
            ]
        )


def _write(report: ProfileReport, out: Path) -> int:
    write_document(out, report.model_dump(mode="json"))
    print(render_summary(report))
    return 0


def import_lm_eval(args: argparse.Namespace) -> int:
    base = load_report(args.into)
    files = [
        lm_eval_import.read_samples_file(p) for p in lm_eval_import.samples_paths(args.samples)
    ]
    model, version = lm_eval_import.one_model(files)
    _check_model(base, model, args.model, "lm-eval")
    categories = lm_eval_import.parse_category_map(args.category)
    part = lm_eval_import.accuracy_part(files, categories, args.metric, args.filter_name)
    merged = with_accuracy(
        base,
        part,
        tool_version=version,
        model=model,
        files=[lm_eval_import.source_file(f.path) for f in files],
        now=datetime.now(UTC),
    )
    return _write(merged, args.out)


def import_guidellm(args: argparse.Namespace) -> int:
    base = load_report(args.into)
    report = guidellm_import.read_report(args.report)
    _check_model(base, report.model, args.model, "GuideLLM")
    merged = with_latency(
        base,
        report.levels,
        tool_version=report.version,
        model=report.model,
        files=[lm_eval_import.source_file(args.report)],
        now=datetime.now(UTC),
    )
    return _write(merged, args.out)
