"""For the settings-name tests: a knob's current value, and a valid raw value that differs
from its default (as the environment would give it)."""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel
from pydantic_settings import BaseSettings

from contracts.knobs import KnobSpec


def value_at(settings: Any, path: tuple[str, ...]) -> Any:
    for part in path:
        settings = getattr(settings, part)
    return settings


def other_raw_value(
    settings_cls: type[BaseSettings], spec: KnobSpec, default: Any, special: Mapping[str, str]
) -> str:
    """`special[flat]` when a generic rule cannot pick (a validated format, a file), else: the
    other bool, a changed number, another literal choice, or a changed string."""
    if spec.flat in special:
        return special[spec.flat]
    if isinstance(default, bool):
        return str(not default).lower()
    if isinstance(default, int):
        return str(default + 1)
    if isinstance(default, float):
        return str(default / 2 or 1.0)
    owner: type[BaseModel] = settings_cls
    if len(spec.path) > 1:
        owner = typing.cast(type[BaseModel], owner.model_fields[spec.path[0]].annotation)
    choices = typing.get_args(owner.model_fields[spec.path[-1]].annotation)
    literal = [c for c in choices if isinstance(c, str) and c != default]
    if literal:
        return literal[0]
    return "http://other:4318" if default is None else f"{default}-other"
