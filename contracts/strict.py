"""Unknown-key rejection for human-written files (policy, fleet and config files).

Contracts ignore unknown fields so that writers can add fields first; a file a person wrote
must instead fail on a typo. `find_unknown_keys` walks the data against the model's fields and
names every unknown key by its path, e.g. `categories.code.min_acuracy`.
"""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel


def _model_of(annotation: Any) -> tuple[str, type[BaseModel]] | None:
    """('model'|'dict'|'seq', Model) for the field shapes our files use, else None."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return ("model", annotation)
    if origin in (typing.Union, types.UnionType):
        for arg in args:
            found = _model_of(arg)
            if found is not None:
                return found
        return None
    if origin is typing.Annotated:
        return _model_of(args[0])
    if origin is dict and len(args) == 2:
        inner = _model_of(args[1])
        return ("dict", inner[1]) if inner and inner[0] == "model" else None
    if origin in (list, tuple) and args:
        inner = _model_of(args[0])
        return ("seq", inner[1]) if inner and inner[0] == "model" else None
    return None


def find_unknown_keys(model: type[BaseModel], data: Any, path: str = "") -> list[str]:
    """Dotted paths of keys in `data` that `model` does not declare (recursively)."""
    if not isinstance(data, dict):
        return []
    found: list[str] = []
    fields = model.model_fields
    aliases = {f.alias: name for name, f in fields.items() if f.alias}
    for key, value in data.items():
        name = aliases.get(key, key)
        where = f"{path}.{key}" if path else str(key)
        if name not in fields:
            found.append(where)
            continue
        shape = _model_of(fields[name].annotation)
        if shape is None:
            continue
        kind, inner = shape
        if kind == "model":
            found += find_unknown_keys(inner, value, where)
        elif kind == "dict" and isinstance(value, dict):
            for k, v in value.items():
                found += find_unknown_keys(inner, v, f"{where}.{k}")
        elif kind == "seq" and isinstance(value, list):
            for i, v in enumerate(value):
                found += find_unknown_keys(inner, v, f"{where}[{i}]")
    return found
