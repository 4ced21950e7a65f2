"""Every sub-package of the planes says in its `__init__` what it holds and what it may import
(issue 31): a folder's role is read where the folder is, not only in docs."""

from __future__ import annotations

import ast

import pytest

from tests.docs.repo_text import REPO_ROOT

PLANES = ("data_plane", "control_plane", "profiler")
# data_plane/settings is the lowest floor (it imports no part of the plane); its docstring
# describes the settings object that lives in that `__init__`.
EXEMPT = frozenset({"data_plane/settings"})


def _sub_packages() -> list[str]:
    found = []
    for plane in PLANES:
        for init in sorted((REPO_ROOT / plane).glob("*/__init__.py")):
            found.append(init.parent.relative_to(REPO_ROOT).as_posix())
    return [p for p in found if p not in EXEMPT]


@pytest.mark.parametrize("package", _sub_packages())
def test_a_sub_package_says_what_it_holds_and_may_import(package: str) -> None:
    tree = ast.parse((REPO_ROOT / package / "__init__.py").read_text(encoding="utf-8"))
    doc = " ".join((ast.get_docstring(tree) or "").split())
    assert doc, f"{package}/__init__.py has no docstring"
    assert "may import" in doc, f"{package}/__init__.py does not say what it may import"
