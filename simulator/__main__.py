"""CLI of the engine simulator (the composition root).

`python -m simulator serve --fleet FILE [--answer-key JSONL ...] [--ports-file OUT.json]` runs
every pair until SIGINT/SIGTERM, printing `READY <name> <url>` per pair; `check` validates.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from simulator.answer_key import AnswerKeyError, KnownAnswer, load_answer_keys
from simulator.config import FleetConfigError, SimFleetConfig, load_fleet
from simulator.fleet import run_fleet

logger = logging.getLogger("simulator")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m simulator", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (
        ("serve", "run the simulated fleet until SIGINT/SIGTERM"),
        ("check", "validate a fleet file (and its answer keys) and exit"),
    ):
        cmd = sub.add_parser(name, help=text)
        cmd.add_argument("--fleet", required=True, type=Path, help="fleet YAML/JSON file")
        cmd.add_argument(
            "--answer-key", action="append", default=[], type=Path, help="extra JSONL answer key"
        )
    serve = sub.choices["serve"]
    serve.add_argument("--ports-file", type=Path, help="write {name: url} JSON here when ready")
    return parser


def _load(
    fleet_path: Path, extra_keys: Sequence[Path]
) -> tuple[SimFleetConfig, dict[str, KnownAnswer]]:
    fleet = load_fleet(fleet_path)
    answers = load_answer_keys([*fleet.answer_keys, *extra_keys])
    return fleet, answers


def _write_ports(path: Path, urls: dict[str, str]) -> None:
    """Atomic: readers never see a half-written file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(urls, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


async def _serve(
    fleet_config: SimFleetConfig, answers: dict[str, KnownAnswer], ports_file: Path | None
) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with run_fleet(fleet_config, answers) as fleet:
        urls = fleet.urls()
        if ports_file is not None:
            _write_ports(ports_file, urls)
        for name, url in urls.items():
            print(f"READY {name} {url}", flush=True)
        logger.info("simulating %d pairs", len(urls))
        await stop.wait()
        logger.info("shutting down")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        fleet, answers = _load(args.fleet, args.answer_key)
    except (FleetConfigError, AnswerKeyError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.command == "check":
        print(f"ok: {len(fleet.pairs)} pairs, {len(answers)} known prompts")
        return 0
    try:
        asyncio.run(_serve(fleet, answers, args.ports_file))
    except OSError as err:
        print(f"error: cannot listen: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
