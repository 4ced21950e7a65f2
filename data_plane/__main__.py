"""`python -m data_plane serve [--flags]`: load settings once (env GEARBOX_DP_*, flags win),
configure JSON logs, build the app and run it with handler cancellation."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from aiohttp import web
from prometheus_client import disable_created_metrics
from pydantic import ValidationError

from contracts.knobs import UnknownKnobsError, knob_name, knobs, renamed_in_use
from data_plane.app import AppDeps, create_app
from data_plane.settings import RENAMED, DataPlaneSettings
from data_plane.telemetry.logs import configure_logging

# Secrets stay out of argv (visible in `ps`): API keys, the /metrics token and the tenant hash
# key come from the environment only.
_NOT_FLAGS = frozenset(
    {"server_api_keys", "engine_keys_api_key", "server_metrics_token", "admission_tenant_key_salt"}
)
# A renamed knob's old flag (`--port`) still sets it for one release: its dest is this + old.
_OLD = "renamed:"

logger = logging.getLogger("data_plane")  # not "__main__": run as `python -m data_plane`


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m data_plane", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    # No abbreviations: `--api-keys` must not be read as `--api-keys-file` (keys stay out
    # of argv).
    serve = sub.add_parser(
        "serve", help="run the data plane (flags override GEARBOX_DP_* env)", allow_abbrev=False
    )
    extproc = sub.add_parser(
        "extproc",
        help="run as an Envoy ext_proc service (docs/gateway.md); same settings",
        allow_abbrev=False,
    )
    for command in (serve, extproc):
        _add_flags(command)
    return parser


def _add_flags(command: argparse.ArgumentParser) -> None:
    """One flag per knob, its name with dashes, its description as help; and each renamed
    knob's old flag, left out of `--help`."""
    for knob in knobs(DataPlaneSettings):
        if knob.flat not in _NOT_FLAGS:
            command.add_argument(
                _flag(knob.flat), dest=knob.flat, metavar="VALUE", help=knob.description
            )
    for old, was in RENAMED.items():
        if was.still_read and was.new not in _NOT_FLAGS:
            command.add_argument(_flag(old), dest=_OLD + old, help=argparse.SUPPRESS)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def renamed_flags(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(old flag, new flag) for each renamed knob's old flag given, in name order."""
    given = sorted(d for d, v in vars(args).items() if d.startswith(_OLD) and v is not None)
    return [(_flag(d.removeprefix(_OLD)), _flag(RENAMED[d.removeprefix(_OLD)].new)) for d in given]


def load_settings(args: argparse.Namespace) -> DataPlaneSettings:
    """Env first, then every flag that was given; raises ValidationError naming the field,
    or UnknownKnobsError naming each GEARBOX_DP_ variable that is no setting."""
    given = {name: value for name, value in vars(args).items() if value is not None}
    overrides: dict[str, Any] = {
        name.removeprefix(_OLD): value
        for name, value in given.items()
        if name.startswith(_OLD) and RENAMED[name.removeprefix(_OLD)].new not in given
    }
    flags = {knob.flat for knob in knobs(DataPlaneSettings)}
    overrides |= {name: value for name, value in given.items() if name in flags}
    return DataPlaneSettings(**overrides)


def log_renamed(args: argparse.Namespace) -> None:
    """A warning per old name still set (variable or flag), naming the new one: old names
    work for one release (`data_plane.settings.renamed`)."""
    for old, new in [*renamed_in_use(DataPlaneSettings), *renamed_flags(args)]:
        logger.warning("setting %s is renamed %s; the old name goes in the next release", old, new)


def _freeze_heap(young_threshold: int) -> Callable[[web.Application], Awaitable[None]]:
    async def freeze(app: web.Application) -> None:
        """After startup (table loaded), move every object so far out of the GC's sight: the
        collector then only scans per-request garbage (about 10% less CPU per request
        here). A request's objects die by reference counting; collecting the young
        generation every 20,000 allocations instead of 700 scans the in-flight requests'
        live objects far less often (a few % less CPU per request)."""
        gc.collect()
        gc.freeze()
        if young_threshold:
            gc.set_threshold(young_threshold, *gc.get_threshold()[1:])

    return freeze


def new_event_loop(kind: str) -> asyncio.AbstractEventLoop:
    """The loop the server runs on: uvloop by default (its transports and scheduling are C:
    markedly less CPU per proxied request), plain asyncio on request."""
    if kind == "uvloop":
        import uvloop  # a declared dependency; imported only when chosen

        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def main(argv: Sequence[str] | None = None, deps: AppDeps | None = None) -> int:
    """`deps`: what `bench.common.dp_variant` swaps in for its A/B rows (None in production)."""
    args = build_parser().parse_args(argv)
    try:
        settings = load_settings(args)
    except UnknownKnobsError as err:
        for variable, why in err.problems:
            print(f"invalid setting {variable}: {why}", file=sys.stderr)
        return 2
    except ValidationError as err:
        for e in err.errors():
            where = knob_name(DataPlaneSettings, tuple(e["loc"])) or "(settings)"
            print(f"invalid setting {where}: {e['msg']}", file=sys.stderr)
        # An old name's bad value is reported under the new name: say which is which.
        for old, new in [*renamed_in_use(DataPlaneSettings), *renamed_flags(args)]:
            print(f"note: {old} is renamed {new}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level)
    log_renamed(args)
    if args.command == "extproc":
        # Imported only in gateway mode: grpc and the Envoy protos stay out of `serve`.
        from data_plane.gateway_app import run_gateway

        run_gateway(settings)
        return 0
    # `_created` series would double the size of /metrics for nothing Prometheus uses.
    disable_created_metrics()  # type: ignore[no-untyped-call]  # untyped in prometheus_client
    app = create_app(settings, deps)
    app.on_startup.append(_freeze_heap(settings.gc_young_threshold))
    loop = new_event_loop(settings.event_loop)
    server = settings.server
    web.run_app(
        app,
        host=server.host,
        port=server.port,
        handler_cancellation=True,
        access_log=None,
        shutdown_timeout=server.shutdown_timeout_s,
        keepalive_timeout=server.keepalive_timeout_s,
        lingering_time=server.lingering_time_s,
        print=None,
        loop=loop,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
