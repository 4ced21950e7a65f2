"""Every module of a package appears in its package's code map, and every module a map names
exists (docs/style.md, section 2): a newcomer finds each module's role in one place."""

from __future__ import annotations

import re

import pytest

from tests.docs.repo_text import REPO_ROOT, section

# package -> the page whose "Code map" section lists its modules
MAPS = {
    "data_plane": "docs/data_plane.md",
    "control_plane": "docs/control_plane.md",
    "profiler": "docs/profiler.md",
    "simulator": "docs/simulator.md",
    "bench": "docs/benchmarks.md",
}
_NAMED = re.compile(r"`([\w/]+\.py)`")


def _modules(package: str) -> set[str]:
    root = REPO_ROOT / package
    return {p.relative_to(root).as_posix() for p in root.rglob("*.py") if p.name != "__init__.py"}


@pytest.mark.parametrize("package", sorted(MAPS))
def test_every_module_is_in_its_package_code_map(package: str) -> None:
    named = set(_NAMED.findall(section(REPO_ROOT / MAPS[package], "Code map")))
    assert sorted(_modules(package) - named) == []


@pytest.mark.parametrize("package", sorted(MAPS))
def test_every_module_a_code_map_names_exists(package: str) -> None:
    named = set(_NAMED.findall(section(REPO_ROOT / MAPS[package], "Code map")))
    assert sorted(named - _modules(package)) == []


@pytest.mark.parametrize("package", ["data_plane", "control_plane"])
def test_the_map_groups_modules_by_folder(package: str) -> None:
    """Sub-package modules are named with their folder, so the map shows each one's layer."""
    text = section(REPO_ROOT / MAPS[package], "Code map")
    folders = {p.split("/")[0] for p in _modules(package) if "/" in p}
    assert folders, f"{package} has no sub-packages"
    for folder in sorted(folders):
        assert f"**`{folder}/`**" in text, f"no group for {folder}/"


def test_one_requests_map_names_every_data_plane_module_and_only_those() -> None:
    """docs/design.md maps one request by capability, from the door to the engine and back:
    every data-plane module is named there (on the path or off it), and each name exists."""
    named = set(_NAMED.findall(section(REPO_ROOT / "docs/design.md", "One request, by capability")))
    modules = _modules("data_plane")
    assert sorted(modules - named) == [], "not in docs/design.md's request map"
    assert sorted(named - modules) == [], "named in docs/design.md's request map, no such module"
