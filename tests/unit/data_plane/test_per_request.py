"""Per-request value types (`data_plane.domain.per_request`): read-only to mypy, plain slotted
dataclasses at run time (docs/style.md, "Types, pydantic, config")."""

from __future__ import annotations

import dataclasses
import importlib
import re
from pathlib import Path

from mypy import api

ROOT = Path(__file__).resolve().parents[3]
DECORATED = re.compile(r"^@per_request\nclass (\w+)", re.MULTILINE)


def per_request_types() -> dict[str, list[str]]:
    """Module -> the classes decorated with @per_request in it, read from the source."""
    found: dict[str, list[str]] = {}
    for path in sorted((ROOT / "data_plane").rglob("*.py")):
        names = DECORATED.findall(path.read_text())
        if names:
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[module] = names
    return found


def test_the_request_path_types_are_per_request() -> None:
    """The types every request builds: a regression guard against one going back to a
    frozen dataclass's run-time check (or forgetting the decorator)."""
    names = {n for ns in per_request_types().values() for n in ns}
    assert {
        "Budget",
        "RequestFacts",
        "RouteRequest",
        "ParsedBody",
        "RouteDecision",
        "Candidate",
        "Served",
        "AttemptLimit",
        "UpstreamRequest",
        "Usage",
        "PairRoom",
        "Fleet",
        "HealthView",
    } <= names


def test_per_request_types_are_slotted_hashable_dataclasses() -> None:
    for module, names in per_request_types().items():
        for name in names:
            cls = getattr(importlib.import_module(module), name)
            params = cls.__dataclass_params__
            assert dataclasses.is_dataclass(cls), name
            assert "__slots__" in vars(cls), name
            assert params.eq, name
            assert cls.__hash__ is not None, name
            assert not params.frozen, f"{name}: frozen checks cost run time; mypy checks it"


def test_mypy_refuses_assigning_a_field(tmp_path: Path) -> None:
    """What makes them immutable: assigning any field of any of them fails `make test`."""
    lines = []
    expected = []
    for i, (module, names) in enumerate(per_request_types().items()):
        for name in names:
            cls = getattr(importlib.import_module(module), name)
            field = dataclasses.fields(cls)[0].name
            lines.append(f"from {module} import {name} as T{i}_{name}")
            lines.append(f"def set_{i}_{name}(v: T{i}_{name}) -> None:")
            lines.append(f"    v.{field} = v.{field}")
            expected.append(f'Property "{field}" defined in "{name}" is read-only')
    snippet = tmp_path / "assign_fields.py"
    snippet.write_text("\n".join(lines) + "\n")
    out, err, status = api.run(
        [str(snippet), "--strict", "--follow-imports=silent", "--cache-dir", str(tmp_path / "c")]
    )
    assert status == 1, out + err
    for words in expected:
        assert words in out, f"mypy accepted an assignment: {words}\n{out}"
    assert out.count("is read-only") == len(expected), out
