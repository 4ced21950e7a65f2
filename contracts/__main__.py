"""`python -m contracts export-schemas [DIR]`: write the JSON Schemas of the wire contracts."""

from __future__ import annotations

import sys
from pathlib import Path

from contracts.schemas_export import SCHEMA_DIR, export_schemas


def main(argv: list[str]) -> int:
    if not argv or argv[0] != "export-schemas" or len(argv) > 2:
        print("usage: python -m contracts export-schemas [DIR]", file=sys.stderr)
        return 2
    target = Path(argv[1]) if len(argv) == 2 else SCHEMA_DIR
    for path in export_schemas(target):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
