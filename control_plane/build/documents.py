"""Parsing of documents people and tools hand us (reports, policies) with field-path errors.

Adapter for files (reads them); the parsing functions themselves do no I/O. Every error names its
source (a file path or `body`) and each bad field by its path, e.g. `latency[2].ttft_s.p95`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from contracts.policy import Policy, PolicyError, load_policy
from contracts.profile_report import ProfileReport

ROOT = "(root)"
SYNTAX = "(syntax)"


@dataclass(frozen=True, slots=True)
class FieldProblem:
    path: str  # dotted field path with [i] for list items; ROOT or SYNTAX for the whole document
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class DocumentError(ValueError):
    """A document is invalid. `code` is `invalid_json` (unparseable) or `invalid_field`."""

    def __init__(self, source: str, problems: Sequence[FieldProblem], code: str) -> None:
        super().__init__(f"{source}: " + "; ".join(str(p) for p in problems))
        self.source = source
        self.problems = tuple(problems)
        self.code = code

    @property
    def param(self) -> str | None:
        """The first bad field's path, or None when the whole document is at fault."""
        first = self.problems[0].path if self.problems else ROOT
        return None if first in (ROOT, SYNTAX) else first


def field_path(loc: Sequence[int | str]) -> str:
    """('latency', 2, 'ttft_s') -> 'latency[2].ttft_s'; () -> ROOT."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or ROOT


def problems_of(err: ValidationError) -> list[FieldProblem]:
    return [
        FieldProblem(field_path(e["loc"]), e["msg"].removeprefix("Value error, "))
        for e in err.errors()
    ]


def parse_json(raw: bytes | str, source: str) -> Any:
    """JSON text -> data; syntax errors name line and column."""
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        where = (
            f"line {err.lineno} column {err.colno}: {err.msg}"
            if isinstance(err, json.JSONDecodeError)
            else "not UTF-8 text"
        )
        raise DocumentError(
            source, [FieldProblem(SYNTAX, f"invalid JSON at {where}")], "invalid_json"
        ) from err


def check_strict_types(model: type[BaseModel], data: Any, source: str) -> None:
    """Admin-API bodies: every value already has its field's JSON type (pydantic strict mode:
    no `true` or `"1"` for a number, no number for a string), named by field path."""
    try:
        model.model_validate_json(json.dumps(data), strict=True)
    except ValidationError as err:
        raise DocumentError(source, problems_of(err), "invalid_field") from err


def parse_report(data: Any, source: str) -> ProfileReport:
    """Validate a ProfileReport (unknown fields are ignored, as for every contract)."""
    try:
        return ProfileReport.model_validate(data)
    except ValidationError as err:
        raise DocumentError(source, problems_of(err), "invalid_field") from err


def parse_policy(data: Any, source: str) -> Policy:
    """Validate a human-written policy: unknown keys and bad values fail by field path."""
    try:
        return load_policy(data)
    except PolicyError as err:
        problems = [FieldProblem(*line.split(": ", 1)) for line in err.errors]
        raise DocumentError(source, problems, "invalid_field") from err


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        reason = err.strerror if isinstance(err, OSError) else "not UTF-8 text"
        raise DocumentError(
            str(path), [FieldProblem(ROOT, f"cannot read: {reason}")], "unreadable"
        ) from err


def load_report_file(path: Path) -> ProfileReport:
    return parse_report(parse_json(_read_text(path), str(path)), str(path))


def load_policy_file(path: Path) -> Policy:
    """A policy from JSON (.json) or YAML (anything else, e.g. a pipe), with path + field-path
    errors."""
    text = _read_text(path)
    if path.suffix.lower() == ".json":
        return parse_policy(parse_json(text, str(path)), str(path))
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        problem = FieldProblem(SYNTAX, f"invalid YAML{where}: {getattr(err, 'problem', err)}")
        raise DocumentError(str(path), [problem], "invalid_json") from err
    return parse_policy(data, str(path))  # an empty file is not a policy
