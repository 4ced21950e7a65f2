"""Entry point: `python -m control_plane COMMAND` (see `control_plane.cli`)."""

from __future__ import annotations

import os
import sys

from control_plane.cli import run


def main() -> int:
    try:
        return run(sys.argv[1:])
    except BrokenPipeError:
        # Output piped into e.g. `head`: stop quietly (and keep the final flush from failing).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
