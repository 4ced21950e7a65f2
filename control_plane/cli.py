"""`python -m control_plane`: serve, push, build, publish, show, history, rollback.

Composition root for the command line: loads settings once, builds adapters, prints one-line
errors (`error: ...`) and returns a non-zero exit code on any failure.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
from pydantic import ValidationError
from redis.exceptions import RedisError

from contracts.knobs import UnknownKnobsError, knob_name, knobs, renamed_in_use
from contracts.policy import Policy
from control_plane.admin_client import AdminApiError, AdminClient
from control_plane.api.classifier_report import classifier_report, render_classifier
from control_plane.build.documents import DocumentError, load_policy_file, load_report_file
from control_plane.build.table import BuildError, build
from control_plane.render import render_history, render_table
from control_plane.runtime.services import Services, make_services
from control_plane.settings import ControlPlaneSettings
from control_plane.store.publisher import PublishError, PublishOutcome
from control_plane.store.redis_connection import make_redis
from control_plane.store.stored_data import StoredDataError

logger = logging.getLogger(__name__)
EXPECTED_ERRORS = (DocumentError, BuildError, PublishError, StoredDataError, RedisError,
                   AdminApiError, aiohttp.ClientError, ValueError, OSError)  # fmt: skip


# Flags renamed to their knob's path (issue 31): old flag's dest -> (old flag, new flag). The
# old flag still sets the knob for one release, left out of `--help`, with a warning.
_RENAMED_FLAGS = {"old_prefix": ("--prefix", "--redis-key-prefix")}


class CliError(Exception):
    """A failure worth one line on stderr."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m control_plane", description=__doc__)
    about = {knob.flat: knob.description for knob in knobs(ControlPlaneSettings)}
    redis = argparse.ArgumentParser(add_help=False)
    # A knob's flag is its path, its help its description; each overrides its variable.
    redis.add_argument("--redis-url", help=about["redis_url"])
    redis.add_argument("--redis-key-prefix", help=about["redis_key_prefix"])
    redis.add_argument("--prefix", dest="old_prefix", help=argparse.SUPPRESS)
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser(
        "serve", help="run the admin API (needs GEARBOX_CP_SERVER_ADMIN_TOKEN)", parents=[redis]
    )
    push = sub.add_parser("push", help="send report files to the admin API")
    push.add_argument("files", nargs="+", type=Path)
    push.add_argument("--url", help="admin API base URL (default http://HOST:PORT)")
    push.add_argument("--token", help="admin token (default GEARBOX_CP_SERVER_ADMIN_TOKEN)")
    b = sub.add_parser("build", help="build a table from report files, offline (no Redis)")
    b.add_argument("reports", nargs="+", type=Path)
    b.add_argument("-o", "--output", required=True, help="table JSON path, or - for stdout")
    pub = sub.add_parser("publish", help="build and publish to Redis directly", parents=[redis])
    pub.add_argument("reports", nargs="*", type=Path, help="default: the stored profiles")
    for cmd in (b, pub):
        cmd.add_argument("--policy", type=Path, help="YAML/JSON policy file")
        cmd.add_argument("--allow-partial", action="store_true", help="accept partial reports")
        cmd.add_argument("--no-prune", action="store_true", help="keep dominated pairs")
    show = sub.add_parser("show", help="print the current (or a given) table", parents=[redis])
    show.add_argument("--version", type=int, dest="table_version")
    show.add_argument("--json", action="store_true", help="print the table JSON")
    sub.add_parser("history", help="list kept table versions", parents=[redis])
    classifier = sub.add_parser(
        "classifier",
        help="the current (or a given) table's category classifier: accuracy, confusion",
        parents=[redis],
    )
    classifier.add_argument("--version", type=int, dest="table_version")
    rollback = sub.add_parser(
        "rollback", help="point the current table at a kept version", parents=[redis]
    )
    rollback.add_argument("version", type=int)
    return p


def _settings(args: argparse.Namespace) -> ControlPlaneSettings:
    overrides: dict[str, Any] = {}
    if getattr(args, "redis_url", None):
        overrides["redis_url"] = args.redis_url
    prefix = getattr(args, "redis_key_prefix", None) or getattr(args, "old_prefix", None)
    if prefix:
        overrides["redis_key_prefix"] = prefix
    if getattr(args, "allow_partial", False):
        overrides["build_allow_partial"] = True
    if getattr(args, "no_prune", False):
        overrides["build_prune"] = False
    try:
        return ControlPlaneSettings(**overrides)
    except UnknownKnobsError as err:  # a GEARBOX_CP_ variable that is no setting
        raise CliError(f"invalid settings: {err}") from err
    except ValidationError as err:
        fields = "; ".join(
            f"GEARBOX_CP_{knob_name(ControlPlaneSettings, tuple(e['loc'])).upper()}: {e['msg']}"
            for e in err.errors()
        )
        # An old name's bad value is reported under the new name: say which is which.
        notes = "; ".join(
            f"{old} is renamed {new}" for old, new in renamed_in_use(ControlPlaneSettings)
        )
        raise CliError(f"invalid settings: {fields}" + (f" ({notes})" if notes else "")) from err


def renamed_flags(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(old flag, new flag) for each renamed flag given."""
    return [names for dest, names in _RENAMED_FLAGS.items() if getattr(args, dest, None)]


def _policy(path: Path | None, settings: ControlPlaneSettings) -> Policy | None:
    chosen = path or settings.policy_file
    return load_policy_file(chosen) if chosen is not None else None


def cmd_build(args: argparse.Namespace, settings: ControlPlaneSettings) -> int:
    reports = [load_report_file(p) for p in args.reports]
    policy = _policy(args.policy, settings) or Policy()
    made = build(reports, policy, datetime.now(UTC), allow_partial=settings.build.allow_partial,
                 prune=settings.build.prune)  # fmt: skip
    for warning in made.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    text = made.table.model_dump_json(indent=2) + "\n"
    if args.output == "-":
        sys.stdout.write(text)
        print(render_table(made.table), file=sys.stderr)
    else:
        Path(args.output).write_text(text, encoding="utf-8")
        print(render_table(made.table))
        print(f"wrote {args.output}")
    return 0


async def _with_services(
    settings: ControlPlaneSettings, action: Callable[[Services], Awaitable[int]]
) -> int:
    redis = make_redis(settings)
    try:
        return await action(make_services(redis, settings, lambda: datetime.now(UTC), None))
    finally:
        await redis.aclose()


async def cmd_publish(
    args: argparse.Namespace, settings: ControlPlaneSettings, services: Services
) -> int:
    policy = _policy(args.policy, settings) or (await services.policies.get()).policy
    if args.reports:
        reports = [load_report_file(p) for p in args.reports]
    else:
        reports = await services.profiles.reports()
    if not reports:
        raise CliError("no reports: pass report files or push some to the control plane first")
    made = await services.table_service.publish_reports(reports, policy)
    for warning in made.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    result = made.publish
    if result.outcome is PublishOutcome.UNCHANGED:
        print(f"unchanged: v{result.version} is current (sha256 {result.content_sha256[:12]})")
    else:
        print(
            f"published v{result.version} (sha256 {result.content_sha256[:12]}, "
            f"{made.entries} entries, {len(made.pruned)} pruned; was v{result.previous_version})"
        )
    return 0


async def cmd_show(
    args: argparse.Namespace, settings: ControlPlaneSettings, services: Services
) -> int:
    wanted = args.table_version
    table = await (services.tables.get(wanted) if wanted else services.tables.current())
    if table is None:
        raise CliError(f"version {wanted} is not kept" if wanted else "no table published yet")
    print(table.model_dump_json(indent=2) if args.json else render_table(table))
    return 0


async def cmd_classifier(
    args: argparse.Namespace, settings: ControlPlaneSettings, services: Services
) -> int:
    wanted = args.table_version
    table = await (services.tables.get(wanted) if wanted else services.tables.current())
    if table is None:
        raise CliError(f"version {wanted} is not kept" if wanted else "no table published yet")
    print(render_classifier(classifier_report(table)))
    return 0


async def cmd_history(
    args: argparse.Namespace, settings: ControlPlaneSettings, services: Services
) -> int:
    current, versions = await services.tables.history()
    print(render_history(current, versions))
    return 0


async def cmd_rollback(
    args: argparse.Namespace, settings: ControlPlaneSettings, services: Services
) -> int:
    result = await services.publisher.rollback(args.version)
    print(f"rolled back to v{result.version} (was v{result.previous_version})")
    return 0


async def cmd_push(args: argparse.Namespace, settings: ControlPlaneSettings) -> int:
    secret = settings.server.admin_token
    token = args.token or (secret.get_secret_value() if secret else "")
    if not token:
        raise CliError("no admin token: pass --token or set GEARBOX_CP_SERVER_ADMIN_TOKEN")
    url = args.url or f"http://{settings.server.host}:{settings.server.port}"
    failures = 0
    async with aiohttp.ClientSession() as session:
        client = AdminClient(session, url, token)
        for path in args.files:
            try:
                load_report_file(path)  # fail early, locally, with field paths
                stored = await client.push_report(path.read_bytes())
            except DocumentError as err:  # names the file already
                failures += 1
                print(f"error: {_one_line(err)}", file=sys.stderr)
                continue
            except (AdminApiError, aiohttp.ClientError, OSError) as err:
                failures += 1
                print(f"error: {path}: {_one_line(err)}", file=sys.stderr)
                continue
            state = "new" if stored["created"] else "replaced"
            print(f"pushed {stored['pair']} ({state}) from {path}")
    return 1 if failures else 0


def _serve(settings: ControlPlaneSettings, renamed: list[tuple[str, str]]) -> int:
    from aiohttp import web

    from control_plane.app import create_app
    from control_plane.logs import configure_json_logging

    configure_json_logging(settings.log_level)
    for old, new in renamed:
        logger.warning("setting %s is renamed %s; the old name goes in the next release", old, new)
    app = create_app(settings)
    server = settings.server
    web.run_app(app, host=server.host, port=server.port, handler_cancellation=True, print=None,
                access_log=None)  # fmt: skip
    return 0


_REDIS_COMMANDS = {
    "publish": cmd_publish,
    "show": cmd_show,
    "history": cmd_history,
    "rollback": cmd_rollback,
    "classifier": cmd_classifier,
}


def run(argv: Sequence[str]) -> int:
    """Parse and run one command; expected failures become `error: ...` and exit code 1."""
    args = _parser().parse_args(argv)
    try:
        settings = _settings(args)
        renamed = [*renamed_in_use(ControlPlaneSettings), *renamed_flags(args)]
        if args.command == "serve":
            return _serve(settings, renamed)
        for old, new in renamed:
            print(f"warning: {old} is renamed {new}", file=sys.stderr)
        if args.command == "build":
            return cmd_build(args, settings)
        if args.command == "push":
            return asyncio.run(cmd_push(args, settings))
        command = _REDIS_COMMANDS[args.command]
        return asyncio.run(_with_services(settings, lambda s: command(args, settings, s)))
    except CliError as err:
        print(f"error: {err}", file=sys.stderr)
    except BrokenPipeError:
        raise  # the reader went away (`| head`); __main__ exits quietly
    except EXPECTED_ERRORS as err:
        print(f"error: {_one_line(err)}", file=sys.stderr)
    return 1


def _one_line(err: BaseException) -> str:
    if isinstance(err, RedisError):
        return f"Redis: {err}"
    return " ".join(str(err).split()) or type(err).__name__
