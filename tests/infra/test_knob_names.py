"""What the shipped deployments, the demo and the benchmark set is each knob's own name (its
path, `contracts.knobs`), never a retired one: retired names stop working in the release after
next (`data_plane.settings.renamed`, `control_plane.settings.RENAMED`)."""

from __future__ import annotations

import re
from pathlib import Path

from contracts.knobs import knobs
from control_plane.settings import ControlPlaneSettings
from data_plane.settings import DataPlaneSettings
from profiler.settings import ProfilerSettings
from tests.infra.manifests import REPO_ROOT

_NAME = re.compile(r"\bGEARBOX_(?:DP|CP|PROF)_[A-Z0-9_]*[A-Z0-9]\b")
_SHIPPED = ["infra", "demo", "bench", "examples", "simulator", "Makefile"]
# The compose stack's own `.env` variable, which compose passes on as
# GEARBOX_CP_SERVER_ADMIN_TOKEN (docs/operations.md).
_COMPOSE_VARIABLES = {"GEARBOX_CP_ADMIN_TOKEN"}


def _knob_variables() -> set[str]:
    planes = (DataPlaneSettings, ControlPlaneSettings, ProfilerSettings)
    return {env.upper() for plane in planes for spec in knobs(plane) for env in spec.env}


def _shipped_files() -> list[Path]:
    found: list[Path] = []
    for top in (REPO_ROOT / name for name in _SHIPPED):
        found.extend(p for p in top.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
        found.extend([top] if top.is_file() else [])
    return found


def _named_in(path: Path) -> set[str]:
    try:
        return set(_NAME.findall(path.read_text(encoding="utf-8")))
    except UnicodeDecodeError:  # an image or other binary file
        return set()


def test_shipped_files_set_knobs_by_their_own_names() -> None:
    files = _shipped_files()
    assert len(files) > 50  # the walk found the files
    known = _knob_variables()
    other = {
        f"{path.relative_to(REPO_ROOT)}: {name}"
        for path in files
        for name in _named_in(path) - known
        if not (path.parent.name == "compose" and name in _COMPOSE_VARIABLES)
    }
    assert sorted(other) == []
