"""A settings class's knobs as the Markdown table its docs page carries: one row per knob
(its variable without the plane's prefix, or a standard's variables; its default; its
description), grouped under a row per group. The docs tables are this output, pasted between
markers and kept equal by `tests/docs/test_settings_tables.py` (`python -m
tests.docs.settings_tables` rewrites them); `--help` prints the same descriptions.
"""

from __future__ import annotations

import re
from pathlib import PurePath
from typing import Any

from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings

from contracts.knobs import KnobSpec, knobs

_MIB = 1024 * 1024


def knob_table(settings_cls: type[BaseSettings]) -> str:
    """The Markdown table of every knob of `settings_cls`, top-level knobs first."""
    prefix = str(settings_cls.model_config.get("env_prefix", "")).lower()
    rows = ["| setting | default | meaning |", "|---|---|---|", "| *top level* | | |"]
    group = ""
    for spec in knobs(settings_cls):
        if len(spec.path) > 1 and spec.path[0] != group:
            group = spec.path[0]
            owner = settings_cls.model_fields[group].annotation
            assert isinstance(owner, type)
            rows.append(f"| **`{group}`** (`{owner.__name__}`) | | {_doc_line(owner)} |")
        rows.append(f"| {_names(spec, prefix)} | {_default(spec, _field(settings_cls, spec))} | "
                    f"{_cell(spec.description or '')} |")  # fmt: skip
    return "\n".join(rows) + "\n"


def _field(settings_cls: type[BaseSettings], spec: KnobSpec) -> FieldInfo:
    if len(spec.path) == 1:
        return settings_cls.model_fields[spec.path[0]]
    owner: Any = settings_cls.model_fields[spec.path[0]].annotation
    info: FieldInfo = owner.model_fields[spec.path[1]]
    return info


def _names(spec: KnobSpec, prefix: str) -> str:
    """The variable without the prefix; a standard's variables marked as read as they are."""
    if spec.env == (prefix + spec.flat,):
        return f"`{spec.flat.upper()}`"
    return ", ".join(f"`{e.upper()}`" for e in spec.env) + " (standard, no prefix)"


def _default(spec: KnobSpec, info: FieldInfo) -> str:
    if info.default_factory is not None:
        return "per process"
    value = info.default
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if value in ("", ()):
        return "none"
    if isinstance(value, int) and spec.flat.endswith("_bytes") and value % _MIB == 0:
        return f"{value // _MIB} MiB"
    if isinstance(value, float):
        return f"`{value:g}`"
    if isinstance(value, str | int | PurePath):
        return f"`{value}`"
    raise TypeError(f"{spec.flat}: no rule to show a default of type {type(value).__name__}")


def _doc_line(owner: type) -> str:
    """The group docstring's first sentence, on one line."""
    text = " ".join((owner.__doc__ or "").split())
    return _cell(re.split(r"(?<=\.)\s+(?=[A-Z])", text, maxsplit=1)[0])


def _cell(text: str) -> str:
    return text.replace("|", "\\|")
