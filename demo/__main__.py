"""`python -m demo real|sim`: the whole Gearbox flow on real engines or the simulator."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from demo.flow import DemoOptions, main

# per mode: requests (None: sized to the machine, demo.sizing), concurrency, loose budget (s)
DEFAULTS: dict[str, tuple[int | None, int, float]] = {
    "real": (None, 4, 30.0),
    "sim": (400, 32, 5.0),
}


def parse_args(argv: list[str]) -> DemoOptions:
    parser = argparse.ArgumentParser(prog="python -m demo", description=__doc__)
    parser.add_argument("mode", choices=sorted(DEFAULTS), help="real engines or the simulator")
    parser.add_argument("--keep-up", action="store_true", help="leave everything running")
    parser.add_argument("--out", type=Path, help="output folder (default out/demo-MODE)")
    parser.add_argument(
        "--requests",
        type=int,
        help="workload size (real: sized to the machine, 40-60; sim 400)",
    )
    parser.add_argument("--concurrency", type=int, help="requests in flight (real 4, sim 32)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    requests, concurrency, loose_s = DEFAULTS[args.mode]
    for name in ("requests", "concurrency"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name} must be at least 1")
    return DemoOptions(
        mode=args.mode,
        out_dir=args.out or Path("out") / f"demo-{args.mode}",
        requests=args.requests or requests,
        concurrency=args.concurrency or concurrency,
        loose_budget_s=loose_s,
        keep_up=args.keep_up,
        seed=args.seed,
    )


if __name__ == "__main__":
    sys.exit(main(parse_args(sys.argv[1:])))
