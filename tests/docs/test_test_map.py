"""Where each product module is tested (docs/style.md, "Tests"): in a test module named after
it (`test_<name>.py` anywhere under tests/), or in the files a row of tests/map.md names. A
row is checked, not trusted: each test file it names imports the module (or runs it: its dotted
name as a string, `python -m`); a row that says "through" names product modules that import it
and are themselves tested (a package's `__init__.py` by a test named after the package)."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

from tests.docs.repo_text import REPO_ROOT

PACKAGES = ("contracts", "control_plane", "data_plane", "profiler", "simulator", "demo")
MAP = REPO_ROOT / "tests" / "map.md"
_ROW = re.compile(r"^\| `([\w/]+\.py)` \| (through )?(.+) \|$")
_NAMED = re.compile(r"`([\w/]+\.py)`")


def _dotted(path: str) -> str:
    return path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def product_modules() -> list[str]:
    found = (p for pkg in PACKAGES for p in (REPO_ROOT / pkg).rglob("*.py"))
    return sorted(
        p.relative_to(REPO_ROOT).as_posix()
        for p in found
        if p.name not in {"__init__.py", "__main__.py"}
    )


@cache
def _test_names() -> frozenset[str]:
    return frozenset(p.stem for p in (REPO_ROOT / "tests").rglob("test_*.py"))


def has_named_test(module: str) -> bool:
    path = Path(module)
    name = path.parent.name if path.name == "__init__.py" else path.stem
    return f"test_{name}" in _test_names()


@cache
def imported_by(path: str) -> frozenset[str]:
    """Dotted names `path` imports: modules, and `package.name` for `from package import name`
    (relative imports resolved against the file's own package)."""
    tree = ast.parse((REPO_ROOT / path).read_text())
    dotted = _dotted(path)
    package = dotted if path.endswith("__init__.py") else dotted.rsplit(".", 1)[0]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return frozenset(names)


def uses(path: str, module: str) -> bool:
    """`path` imports `module`, or names it as a string to run it (`python -m`)."""
    dotted = _dotted(module)
    return dotted in imported_by(path) or f'"{dotted}"' in (REPO_ROOT / path).read_text()


def rows() -> dict[str, tuple[bool, list[str]]]:
    """module -> (tested through other product modules, the files named)."""
    found: dict[str, tuple[bool, list[str]]] = {}
    for line in MAP.read_text().splitlines():
        match = _ROW.match(line)
        if match:
            module, through, where = match.groups()
            assert module not in found, f"two rows for {module}"
            found[module] = (through is not None, _NAMED.findall(where))
    return found


def test_every_module_has_a_test_named_after_it_or_a_row() -> None:
    listed = rows()
    missing = [m for m in product_modules() if not has_named_test(m) and m not in listed]
    assert missing == []


def test_every_row_is_a_module_without_a_test_named_after_it() -> None:
    """(A package's `__init__.py` may have a row, for the modules tested through it.)"""
    stale = [m for m in rows() if not (REPO_ROOT / m).is_file() or has_named_test(m)]
    assert stale == []


@pytest.mark.parametrize("module", sorted(rows()))
def test_what_a_row_names_imports_the_module(module: str) -> None:
    through, where = rows()[module]
    assert where, f"{module}: the row names no file"
    for path in where:
        assert (REPO_ROOT / path).is_file(), f"{module}: {path} does not exist"
        assert uses(path, module), f"{path} does not import {module}"
        if through:
            assert not path.startswith("tests/"), f"{module}: 'through' names product modules"
            assert has_named_test(path) or path in rows(), f"{module}: {path} is not tested"
        else:
            assert path.startswith("tests/"), f"{module}: {path} is not a test file"
