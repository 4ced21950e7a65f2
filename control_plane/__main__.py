"""Entry point: `python -m control_plane COMMAND` (see `control_plane.cli`)."""

from __future__ import annotations

import sys

from control_plane.cli import run

if __name__ == "__main__":
    raise SystemExit(run(sys.argv[1:]))
